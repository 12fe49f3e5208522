// Block-wise dynamic 8-bit quantisation (optim/block_quant.h) against the properties of
// Dettmers et al. (2021) it promises: the codes' shape (ascending, 0 and +-1 exact, the
// decades' resolution), nearest-code rounding checked by brute force over all 256 code
// values, exact 0 and block maximum, all-zero blocks, and idempotence (quantising what
// was dequantised gives back the same bytes and scale, which a checkpoint relies on).
#include "optim/block_quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <set>
#include <vector>

#include "tests/catch.h"

namespace ps::optim {
namespace {

TEST_CASE("codes: ascending, 0 and the top exact, a decade per step of resolution", "[block_quant]") {
  for (QuantCode code : {QuantCode::kSigned, QuantCode::kUnsigned}) {
    const bool sign = code == QuantCode::kSigned;
    INFO((sign ? "signed" : "unsigned"));
    const auto& c = CodeValues(code);
    CHECK(std::is_sorted(c.begin(), c.end()));
    const std::set<float> distinct(c.begin(), c.end());
    CHECK(distinct.size() == (sign ? 255u : 256u));
    CHECK(distinct.count(0.0f) == 1);
    CHECK(c.back() == 1.0f);
    CHECK(c.front() == (sign ? -1.0f : 0.0f));
    float smallest = 1.0f;
    for (float x : c) {
      if (x > 0.0f) smallest = std::min(smallest, x);
    }
    CHECK(smallest == (sign ? 1e-6f : 1e-7f));
    // The top decade (0.1, 1] holds 64 values per sign (signed) or 128 (unsigned).
    const auto top = std::count_if(c.begin(), c.end(), [](float x) { return x > 0.1f; });
    CHECK(top == (sign ? 64 : 128) + (sign ? 1 : 0));  // the signed code repeats 1.0
  }
}

TEST_CASE("quantise: every code is the nearest code value (brute force); 0 and the maximum exact",
          "[block_quant]") {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  for (QuantCode code : {QuantCode::kSigned, QuantCode::kUnsigned}) {
    const auto& values = CodeValues(code);
    for (int64_t n : {1, 2, 17, 255, 256}) {
      std::vector<float> x(n);
      for (auto& e : x) {
        // Magnitudes over 8 decades, as Adam's moments spread.
        e = normal(rng) * std::pow(10.0f, -static_cast<float>(rng() % 8));
        if (code == QuantCode::kUnsigned) e = std::fabs(e);
      }
      if (n > 2) x[1] = 0.0f;
      std::vector<uint8_t> q(n);
      const float scale = QuantizeBlock(x.data(), n, code, q.data());
      float absmax = 0.0f;
      for (float e : x) absmax = std::max(absmax, std::fabs(e));
      REQUIRE(scale == absmax);
      std::vector<float> back(n);
      DequantizeBlock(q.data(), n, scale, code, back.data());
      for (int64_t i = 0; i < n; ++i) {
        INFO("n " << n << " element " << i << " value " << x[i]);
        if (std::fabs(x[i]) == absmax || x[i] == 0.0f) CHECK(back[i] == x[i]);
        const float normalised = x[i] / scale;
        const float err = std::fabs(values[q[i]] - normalised);
        for (float v : values) CHECK(err <= std::fabs(v - normalised));
      }
    }
  }
}

// The error bound that follows from the code's shape: a normalised value in decade i
// (magnitudes in [T/10, T], T = 10^(i + 1 - decades), 2^i equal steps of 0.9 T / 2^i)
// comes back within half a step, so at most 4.5 / 2^i of its magnitude (3.5% in the
// unsigned code's top decade, 7% in the signed code's); below the smallest code value,
// within half of it. Checked on log-uniform values over every decade, scale 1.
TEST_CASE("quantise: the error within each decade is at most half its step", "[block_quant]") {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> exponent(-9.0, 0.0);
  for (QuantCode code : {QuantCode::kSigned, QuantCode::kUnsigned}) {
    const bool sign = code == QuantCode::kSigned;
    const int decades = sign ? 7 : 8;
    const float smallest = sign ? 1e-6f : 1e-7f;
    int checked_below = 0, checked_in_decades = 0;
    for (int block = 0; block < 400; ++block) {
      std::vector<float> x(256);
      x[0] = 1.0f;  // scale 1: normalised values are the values
      for (size_t i = 1; i < x.size(); ++i) {
        x[i] = static_cast<float>(std::pow(10.0, exponent(rng))) * (sign && rng() % 2 ? -1.0f : 1.0f);
      }
      std::vector<uint8_t> q(x.size());
      REQUIRE(QuantizeBlock(x.data(), static_cast<int64_t>(x.size()), code, q.data()) == 1.0f);
      std::vector<float> back(x.size());
      DequantizeBlock(q.data(), static_cast<int64_t>(x.size()), 1.0f, code, back.data());
      for (size_t i = 1; i < x.size(); ++i) {
        const double a = std::fabs(static_cast<double>(x[i])), err = std::fabs(static_cast<double>(back[i]) - x[i]);
        INFO((sign ? "signed " : "unsigned ") << "value " << x[i] << " back " << back[i]);
        if (a < smallest) {
          CHECK(err <= smallest / 2.0 * (1 + 1e-6));
          ++checked_below;
          continue;
        }
        const int k = std::min(decades - 1, static_cast<int>(std::floor(std::log10(a))) + decades);  // decade index
        const double top = std::pow(10.0, k + 1 - decades), half_step = 0.45 * top / (1 << k);
        CHECK(err <= half_step * (1 + 1e-5));
        CHECK(err <= 4.5 / (1 << k) * a * (1 + 1e-5));
        ++checked_in_decades;
      }
    }
    CHECK(checked_below > 1000);
    CHECK(checked_in_decades > 50000);
  }
}

TEST_CASE("an all-zero block: scale 0, zeros back", "[block_quant]") {
  const std::vector<float> zeros(100, 0.0f);
  std::vector<uint8_t> q(100);
  std::vector<float> back(100, 1.0f);
  CHECK(QuantizeBlock(zeros.data(), 100, QuantCode::kSigned, q.data()) == 0.0f);
  DequantizeBlock(q.data(), 100, 0.0f, QuantCode::kSigned, back.data());
  CHECK(back == zeros);
}

TEST_CASE("quantising what was dequantised gives the same bytes and scale", "[block_quant]") {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  for (QuantCode code : {QuantCode::kSigned, QuantCode::kUnsigned}) {
    std::vector<float> x(kQuantBlockNumel);
    for (auto& e : x) e = code == QuantCode::kSigned ? normal(rng) : std::fabs(normal(rng)) * 1e-4f;
    std::vector<uint8_t> q(x.size()), q2(x.size());
    const float scale = QuantizeBlock(x.data(), kQuantBlockNumel, code, q.data());
    std::vector<float> back(x.size());
    DequantizeBlock(q.data(), kQuantBlockNumel, scale, code, back.data());
    CHECK(QuantizeBlock(back.data(), kQuantBlockNumel, code, q2.data()) == scale);
    CHECK(q2 == q);
  }
}

// The code of one value through QuantBuckets, as QuantizeBlock takes it.
uint8_t BucketCode(float x, QuantCode code) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  const QuantBuckets& b = BucketsOf(code);
  const int k = BucketIndex(bits);
  return static_cast<uint8_t>(b.base[k] + (b.threshold[k] < x ? 1 : 0));
}

TEST_CASE("the bucket look-up (both forms) equals the binary search: every threshold +-1 ulp, a stride of all floats "
          "in [-1, 1]",
          "[block_quant]") {
  for (QuantCode code : {QuantCode::kSigned, QuantCode::kUnsigned}) {
    const auto& t = CodeThresholds(code);
    int64_t checked = 0, wrong = 0;
    const QuantBuckets& b = BucketsOf(code);
    auto check = [&](float x) {
      ++checked;
      if (BucketCode(x, code) != NearestCode(x, code)) ++wrong;
      uint32_t bits;
      std::memcpy(&bits, &x, sizeof bits);  // the SIMD kernels' packed word: the same code
      if (PackedCode(b.packed[BucketIndex(bits)], bits) != BucketCode(x, code)) ++wrong;
    };
    for (int k = 1; k < 256; ++k) {
      for (float x : {std::nextafter(t[k], -2.0f), t[k], std::nextafter(t[k], 2.0f)}) {
        if (std::fabs(x) <= 1.0f) check(x);
      }
    }
    for (uint32_t bits = 0; bits <= 0x3f800000u; bits += 997) {  // +0 .. 1.0, then the negatives
      float x;
      std::memcpy(&x, &bits, sizeof x);
      check(x);
      check(-x);
    }
    INFO(checked << " values checked");
    CHECK(wrong == 0);
  }
}

TEST_CASE("NearestCode: monotone, ties to the lower code", "[block_quant]") {
  const auto& t = CodeThresholds(QuantCode::kUnsigned);
  CHECK(NearestCode(t[100], QuantCode::kUnsigned) == 99);
  CHECK(NearestCode(std::nextafter(t[100], 2.0f), QuantCode::kUnsigned) == 100);
  uint8_t last = 0;
  for (float x = 0.0f; x <= 1.0f; x += 1.0f / 4096) {
    const uint8_t q = NearestCode(x, QuantCode::kUnsigned);
    CHECK(q >= last);
    last = q;
  }
  CHECK(NearestCode(-1.0f, QuantCode::kSigned) == 0);
  CHECK(NearestCode(1.0f, QuantCode::kSigned) == 254);
}

}  // namespace
}  // namespace ps::optim
