// The element conversions and the stochastic-rounding hash of the Adam kernels'
// specification (optim/cpu_adam.h), in bits: one definition shared by the CPU kernels
// (optim/cpu_adam_element.h) and the CUDA kernels (device_adam_cuda.cu,
// device_rounding_cuda.cu), so the GPU cannot drift from the spec. `static inline`: each
// ISA's translation unit keeps its own copy (cpu_adam_element.h says why); under nvcc
// they are host and device functions.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define PS_HOST_DEVICE __host__ __device__
#else
#define PS_HOST_DEVICE
#endif

namespace ps::optim::internal {

static inline PS_HOST_DEVICE uint32_t FloatBits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static inline PS_HOST_DEVICE float BitsFloat(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static inline PS_HOST_DEVICE float ScalarHalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0) {  // zero or subnormal: mant * 2^-24, exact in fp32
    const float magnitude = static_cast<float>(mant) * 5.9604644775390625e-8f;
    return BitsFloat(FloatBits(magnitude) | sign);
  }
  if (exp == 31) return BitsFloat(sign | 0x7f800000u | (mant << 13));
  return BitsFloat(sign | ((exp + 112) << 23) | (mant << 13));
}

// Round to nearest even; overflow to inf; NaN to a quiet NaN keeping the top payload
// bits (what F16C does).
static inline PS_HOST_DEVICE uint16_t ScalarFloatToHalf(float f) {
  const uint32_t x = FloatBits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00u | static_cast<uint16_t>((a >> 13) & 0x3ffu);
  if (a >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520 rounds to inf
  if (a < 0x38800000u) {                        // below 2^-14: half subnormal or zero
    const uint32_t exp = a >> 23;
    if (exp < 102) return sign;                 // < 2^-25: rounds to zero
    const uint32_t mant = (a & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exp;           // 14..24
    uint32_t r = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1u))) ++r;
    return sign | static_cast<uint16_t>(r);
  }
  uint32_t r = a - 0x38000000u;                 // rebias the exponent (127 -> 15)
  const uint32_t rem = r & 0x1fffu;
  r >>= 13;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;
  return sign | static_cast<uint16_t>(r);
}

static inline PS_HOST_DEVICE float ScalarBf16ToFloat(uint16_t b) { return BitsFloat(static_cast<uint32_t>(b) << 16); }

// Round to nearest even; every NaN becomes 0x7fc0 (as c10::BFloat16).
static inline PS_HOST_DEVICE uint16_t ScalarFloatToBf16(float f) {
  const uint32_t x = FloatBits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return 0x7fc0u;
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

// SrHash and FloatToBf16Stochastic (cpu_adam.h), the spec the SIMD variants follow.
static inline PS_HOST_DEVICE uint32_t ScalarSrMix(uint32_t x) {
  x = ((x >> 16) ^ x) * 0x45d9f3bu;
  x = ((x >> 16) ^ x) * 0x45d9f3bu;
  return (x >> 16) ^ x;
}

static inline PS_HOST_DEVICE uint32_t ScalarSrHash(uint32_t index, uint32_t seed) {
  return ScalarSrMix(ScalarSrMix(index) ^ seed);
}

static inline PS_HOST_DEVICE uint16_t ScalarFloatToBf16Stochastic(float f, uint32_t hash) {
  const uint32_t x = FloatBits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return 0x7fc0u;
  return static_cast<uint16_t>((x + (hash >> 16)) >> 16);  // no wrap: x <= 0xff800000 here
}

}  // namespace ps::optim::internal
