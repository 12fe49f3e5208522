// Block-wise dynamic 8-bit quantisation, the storage of Adam's moments under
// optimizer.state_dtype int8 (Dettmers et al., "8-bit Optimizers via Block-wise
// Quantization", 2021).
//
// A block of up to kQuantBlockNumel values is stored as one fp32 scale, the block's
// largest magnitude, and one byte per value: the index of the code value nearest to
// value / scale. The code is dynamic (non-linear): its values are spread over decades,
// 10^-k .. 10^(1-k), each decade holding twice the values of the one below, so small
// normalised values keep a relative precision that a linear code would lose. m uses the
// signed code (7 decades, 1e-6 .. 1, both signs, and 0), v the unsigned one (8 decades,
// 1e-7 .. 1, and 0): v is never negative, so its sign bit buys a decade instead.
//
// Exactness: 0 and the block's largest magnitude (normalised to +-1) are code values, so
// both come back exactly; any other value comes back as the nearest code value times the
// scale (ties to the lower code). QuantizeBlock is the reference every kernel variant
// must equal bitwise: normalise by one IEEE division, then count the thresholds (the
// midpoints between neighbouring code values) below the normalised value.
#pragma once

#include <array>
#include <cstdint>

namespace ps::optim {

constexpr int64_t kQuantBlockNumel = 256;

enum class QuantCode { kSigned, kUnsigned };

// The code's 256 values, ascending. The signed code has 255 distinct values; its last
// entry repeats 1.0 and is never produced.
const std::array<float, 256>& CodeValues(QuantCode code);
// thresholds[k] (k = 1..255) = the midpoint of values k-1 and k, rounded to fp32;
// thresholds[0] = -inf. The code of x is the number of thresholds[1..255] below x.
const std::array<float, 256>& CodeThresholds(QuantCode code);

// Quantises `n` (1 .. kQuantBlockNumel) values into `codes`; returns the scale (the
// largest magnitude; 0 for an all-zero block, whose codes are then all the code of 0).
// Values must be finite.
float QuantizeBlock(const float* x, int64_t n, QuantCode code, uint8_t* codes);
// out[i] = CodeValues(code)[codes[i]] * scale.
void DequantizeBlock(const uint8_t* codes, int64_t n, float scale, QuantCode code, float* out);

// The code of one normalised value (|x| <= 1), by binary search over the thresholds.
uint8_t NearestCode(float normalised, QuantCode code);

}  // namespace ps::optim
