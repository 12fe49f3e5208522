#include "optim/block_quant.h"

#include <algorithm>
#include <cmath>
#include <limits>
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

float QuantizeBlock(const float* x, int64_t n, QuantCode code, uint8_t* codes) {
  float scale = 0.0f;
  for (int64_t i = 0; i < n; ++i) scale = std::max(scale, std::fabs(x[i]));
  for (int64_t i = 0; i < n; ++i) codes[i] = NearestCode(scale > 0.0f ? x[i] / scale : 0.0f, code);
  return scale;
}

void DequantizeBlock(const uint8_t* codes, int64_t n, float scale, QuantCode code, float* out) {
  const std::array<float, 256>& values = CodeValues(code);
  for (int64_t i = 0; i < n; ++i) out[i] = values[codes[i]] * scale;
}

}  // namespace ps::optim
