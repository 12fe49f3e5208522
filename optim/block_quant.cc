#include "optim/block_quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <vector>

namespace ps::optim {
namespace {

// Decade i (0 = the lowest) of a code with `decades` decades holds 2^i values, the
// right ends of 2^i equal steps from 0.1 x top to top, top = 10^(i + 1 - decades).
// Computed in double (exact decimal powers, IEEE operations only), rounded once to fp32.
std::array<float, 256> MakeValues(QuantCode code) {
  static constexpr double kPow10[] = {1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0};
  const bool sign = code == QuantCode::kSigned;
  const int decades = sign ? 7 : 8;
  std::vector<double> values = {0.0};
  for (int i = 0; i < decades; ++i) {
    const double top = kPow10[8 - decades + i];
    const int steps = 1 << i;
    for (int k = 1; k <= steps; ++k) {
      const double x = top * (0.1 + 0.9 * k / steps);
      values.push_back(x);
      if (sign) values.push_back(-x);
    }
  }
  std::sort(values.begin(), values.end());
  if (sign) values.push_back(1.0);  // 255 distinct values: the last entry repeats the top
  std::array<float, 256> out{};
  for (int k = 0; k < 256; ++k) out[k] = static_cast<float>(values[k]);
  return out;
}

std::array<float, 256> MakeThresholds(const std::array<float, 256>& values) {
  std::array<float, 256> t{};
  t[0] = -std::numeric_limits<float>::infinity();
  for (int k = 1; k < 256; ++k) {
    t[k] = static_cast<float>((static_cast<double>(values[k - 1]) + static_cast<double>(values[k])) / 2.0);
  }
  return t;
}

float FloatOfBits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// QuantBuckets::packed's word of a bucket whose magnitudes start at `lo_bits`: `base`,
// and the key of `threshold` (+inf: none), which must share the bucket's top 16 bits.
uint32_t PackedWord(int base, float threshold, uint32_t lo_bits, bool negative) {
  uint32_t key = 0x10000u;
  if (!std::isinf(threshold)) {
    uint32_t bits;
    std::memcpy(&bits, &threshold, sizeof bits);
    if ((bits & 0x7fff0000u) != (lo_bits & 0x7fff0000u) || (bits >> 31) != (negative ? 1u : 0u)) {
      throw std::logic_error("block_quant: a threshold outside its bucket's top bits");
    }
    key = negative ? 0xffffu - (bits & 0xffffu) : bits & 0xffffu;
  }
  return static_cast<uint32_t>(base) << QuantBuckets::kKeyBits | key;
}

// Bucket k's magnitudes [lo, hi): k = 0 is [0, 2^-25); the others start at their
// exponent and mantissa bits. For x >= 0: base = #thresholds < lo, and the one threshold
// in [lo, hi) if any. For x < 0 (values in (-hi, -lo]): base = #thresholds <= -hi, and
// the one in (-hi, -lo]. Two thresholds in one bucket would break the look-up: refused.
QuantBuckets MakeBuckets(QuantCode code) {
  const std::array<float, 256>& t = CodeThresholds(code);
  QuantBuckets b;
  const float inf = std::numeric_limits<float>::infinity();
  for (int k = 0; k < QuantBuckets::kCount; ++k) {
    const uint32_t lo_bits = k == 0 ? 0u : (QuantBuckets::kMinExponent + (k - 1) / 128) << 23 | ((k - 1) % 128) << 16;
    const uint32_t hi_bits = (QuantBuckets::kMinExponent + k / 128) << 23 | (k % 128) << 16;
    const float lo = FloatOfBits(lo_bits), hi = FloatOfBits(hi_bits);
    int below = 0, below_neg = 0, inside = 0, inside_neg = 0;
    float thr = inf, thr_neg = inf;
    for (int j = 1; j < 256; ++j) {
      below += t[j] < lo ? 1 : 0;
      below_neg += t[j] <= -hi ? 1 : 0;
      if (t[j] >= lo && t[j] < hi) {
        ++inside;
        thr = t[j];
      }
      if (t[j] > -hi && t[j] <= -lo) {
        ++inside_neg;
        thr_neg = t[j];
      }
    }
    if (inside > 1 || inside_neg > 1) throw std::logic_error("block_quant: two thresholds in one bucket");
    b.base[k] = static_cast<uint8_t>(below);
    b.threshold[k] = thr;
    b.base[QuantBuckets::kCount + k] = static_cast<uint8_t>(below_neg);
    b.threshold[QuantBuckets::kCount + k] = thr_neg;
    b.packed[k] = PackedWord(below, thr, lo_bits, /*negative=*/false);
    b.packed[QuantBuckets::kCount + k] = PackedWord(below_neg, thr_neg, lo_bits, /*negative=*/true);
  }
  return b;
}

}  // namespace

const std::array<float, 256>& CodeValues(QuantCode code) {
  static const std::array<float, 256> kSigned = MakeValues(QuantCode::kSigned);
  static const std::array<float, 256> kUnsigned = MakeValues(QuantCode::kUnsigned);
  return code == QuantCode::kSigned ? kSigned : kUnsigned;
}

const std::array<float, 256>& CodeThresholds(QuantCode code) {
  static const std::array<float, 256> kSigned = MakeThresholds(CodeValues(QuantCode::kSigned));
  static const std::array<float, 256> kUnsigned = MakeThresholds(CodeValues(QuantCode::kUnsigned));
  return code == QuantCode::kSigned ? kSigned : kUnsigned;
}

uint8_t NearestCode(float normalised, QuantCode code) {
  const std::array<float, 256>& t = CodeThresholds(code);
  int lo = 0;  // thresholds t[1..lo] are below `normalised`
  for (int step = 128; step > 0; step /= 2) {
    if (t[lo + step] < normalised) lo += step;
  }
  return static_cast<uint8_t>(lo);
}

const QuantBuckets& BucketsOf(QuantCode code) {
  static const QuantBuckets kSigned = MakeBuckets(QuantCode::kSigned);
  static const QuantBuckets kUnsigned = MakeBuckets(QuantCode::kUnsigned);
  return code == QuantCode::kSigned ? kSigned : kUnsigned;
}

float QuantizeBlock(const float* x, int64_t n, QuantCode code, uint8_t* codes) {
  float scale = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    scale = scale < a ? a : scale;  // a NaN is ignored, as the SIMD max with it second
  }
  const QuantBuckets& b = BucketsOf(code);
  for (int64_t i = 0; i < n; ++i) {
    const float normalised = scale > 0.0f ? x[i] / scale : 0.0f;
    uint32_t bits;
    std::memcpy(&bits, &normalised, sizeof bits);
    const int k = BucketIndex(bits);
    codes[i] = static_cast<uint8_t>(b.base[k] + (b.threshold[k] < normalised ? 1 : 0));
  }
  return scale;
}

void DequantizeBlock(const uint8_t* codes, int64_t n, float scale, QuantCode code, float* out) {
  const std::array<float, 256>& values = CodeValues(code);
  for (int64_t i = 0; i < n; ++i) out[i] = values[codes[i]] * scale;
}

}  // namespace ps::optim
