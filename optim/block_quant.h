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
// must equal bitwise: the scale is the largest magnitude (NaNs ignored), each value is
// normalised by one IEEE division, and its code is the number of thresholds (the
// midpoints between neighbouring code values) below it, found through QuantBuckets
// (equal to the binary search of NearestCode for every finite value; tested).
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

// The code of one normalised value (|x| <= 1), by binary search over the thresholds:
// the specification QuantBuckets implements.
uint8_t NearestCode(float normalised, QuantCode code);

// Buckets of a normalised value's magnitude bits, each holding at most one threshold
// (checked when built), so a code is one table look-up and one comparison:
// code = base[k] + (threshold[k] < x), k = BucketIndex(bits of x). A bucket is a biased
// exponent from kMinExponent up with the top 7 mantissa bits (all smaller magnitudes,
// zero included, share bucket 0); the second half of each table is for negative x.
//
// `packed` holds both in one 32-bit word for the SIMD kernels (one gather instead of
// two): base << 17 | key. A value and its bucket's threshold share their sign, exponent
// and top 7 mantissa bits, so threshold < x is decided by the low 16 bits L alone:
// L(threshold) < L(x) for x >= 0, L(threshold) > L(x) for x < 0. key is L(threshold),
// or 0xffff - L(threshold) in the negative half, and 0x10000 where the bucket holds
// none; then code = base + (key < y), y = L(x) ^ (x < 0 ? 0xffff : 0) (PackedCode).
struct QuantBuckets {
  static constexpr uint32_t kMinExponent = 102;  // 2^-25, below every nonzero threshold
  static constexpr int kCount = 1 + (128 - static_cast<int>(kMinExponent)) * 128;
  // 4 bytes of padding: a SIMD gather reads 32 bits at each byte offset.
  std::array<uint8_t, 2 * kCount + 4> base{};
  std::array<float, 2 * kCount> threshold{};  // +inf where the bucket holds none
  std::array<uint32_t, 2 * kCount> packed{};
  static constexpr uint32_t kKeyBits = 17;
};
const QuantBuckets& BucketsOf(QuantCode code);

// The bucket of fp32 bit pattern `bits` (sign included); magnitudes above 1 (and NaN)
// are clamped into the last exponent's buckets. `static`: each ISA's translation unit
// keeps its own copy (optim/cpu_adam_element.h says why).
static inline int BucketIndex(uint32_t bits) {
  const uint32_t magnitude = bits & 0x7fffffffu;
  uint32_t exponent = magnitude >> 23;
  exponent = exponent > 127u ? 127u : exponent;
  const int bucket = exponent < QuantBuckets::kMinExponent
                         ? 0
                         : 1 + static_cast<int>((exponent - QuantBuckets::kMinExponent) * 128u + ((magnitude >> 16) & 127u));
  return bucket + ((bits >> 31) != 0 ? QuantBuckets::kCount : 0);
}

// The code of fp32 bit pattern `bits` from its bucket's packed word (QuantBuckets).
static inline uint32_t PackedCode(uint32_t word, uint32_t bits) {
  const uint32_t y = (bits & 0xffffu) ^ ((bits >> 31) != 0 ? 0xffffu : 0u);
  return (word >> QuantBuckets::kKeyBits) + ((word & ((1u << QuantBuckets::kKeyBits) - 1)) < y ? 1u : 0u);
}

}  // namespace ps::optim
