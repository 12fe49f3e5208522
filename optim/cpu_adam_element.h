// Internal to the CPU Adam kernels: the per-element update and the scalar loads and
// stores (the conversions' bits: optim/element_bits.h), shared by every variant's
// translation unit. Everything here is `static
// inline` on purpose: each ISA's translation unit gets its own copy compiled with its
// own flags, so no AVX code can leak into the scalar path through the linker (for the
// same reason the math is written with compiler builtins, not std:: inline functions).
#pragma once

#include <cstdint>
#include <cstring>

#include "optim/block_quant.h"
#include "optim/cpu_adam.h"
#include "optim/element_bits.h"

namespace ps::optim::internal {

static inline float LoadScalar(const void* base, ElemType type, int64_t i) {
  switch (type) {
    case ElemType::kFp32: return static_cast<const float*>(base)[i];
    case ElemType::kFp16: return ScalarHalfToFloat(static_cast<const uint16_t*>(base)[i]);
    case ElemType::kBf16: return ScalarBf16ToFloat(static_cast<const uint16_t*>(base)[i]);
    case ElemType::kInt8: break;  // block-wise state: AdamInt8Blocks, never element by element
  }
  return 0.0f;
}

static inline void StoreScalar(void* base, ElemType type, int64_t i, float value) {
  switch (type) {
    case ElemType::kFp32: static_cast<float*>(base)[i] = value; return;
    case ElemType::kFp16: static_cast<uint16_t*>(base)[i] = ScalarFloatToHalf(value); return;
    case ElemType::kBf16: static_cast<uint16_t*>(base)[i] = ScalarFloatToBf16(value); return;
    case ElemType::kInt8: return;  // block-wise state: AdamInt8Blocks
  }
}

// The specification of one element's update. The SIMD variants perform exactly these
// operations in this order (every fmaf is a fused multiply-add there too).
static inline void AdamElement(float grad, float& p, float& m, float& v, const AdamHyper& h) {
  float g = grad * h.grad_scale;
  p = p * h.decay_factor;                                // AdamW decay (1 otherwise)
  g = __builtin_fmaf(h.l2, p, g);                              // Adam L2 term (0 otherwise)
  m = __builtin_fmaf(h.beta1, m, h.one_minus_beta1 * g);
  v = __builtin_fmaf(h.beta2, v, (h.one_minus_beta2 * g) * g);
  const float denom = __builtin_fmaf(__builtin_sqrtf(v), h.inv_sqrt_bias_correction2, h.eps);
  p = __builtin_fmaf(-h.step_size, m / denom, p);
}

// m and v in s.state_type: widened on load, rounded on store (exact for fp32).
// Without a master (master null) the weight is read from param_out (bf16) and stored
// stochastically rounded.
static inline void AdamElements(const AdamSpan& s, const AdamHyper& h, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    float m = LoadScalar(s.m, s.state_type, i), v = LoadScalar(s.v, s.state_type, i);
    if (s.master == nullptr) {
      float p = LoadScalar(s.param_out, ElemType::kBf16, i);
      AdamElement(LoadScalar(s.grad, s.grad_type, i), p, m, v, h);
      const uint32_t hash = ScalarSrHash(static_cast<uint32_t>(s.sr_index + i), s.sr_seed);
      static_cast<uint16_t*>(s.param_out)[i] = ScalarFloatToBf16Stochastic(p, hash);
    } else {
      AdamElement(LoadScalar(s.grad, s.grad_type, i), s.master[i], m, v, h);
      if (s.param_out != nullptr) StoreScalar(s.param_out, s.out_type, i, s.master[i]);
    }
    StoreScalar(s.m, s.state_type, i, m);
    StoreScalar(s.v, s.state_type, i, v);
  }
}

static inline int64_t ElemBytes(ElemType t) { return t == ElemType::kFp32 ? 4 : t == ElemType::kInt8 ? 1 : 2; }

// Elements [begin, end) of `s` (begin: a kQuantBlockNumel boundary when the state is int8).
static inline AdamSpan SubSpan(const AdamSpan& s, int64_t begin, int64_t end) {
  AdamSpan out = s;
  out.master = s.master != nullptr ? s.master + begin : nullptr;
  out.sr_index = s.sr_index + begin;
  out.m = static_cast<char*>(s.m) + begin * ElemBytes(s.state_type);
  out.v = static_cast<char*>(s.v) + begin * ElemBytes(s.state_type);
  out.grad = static_cast<const char*>(s.grad) + begin * ElemBytes(s.grad_type);
  if (s.param_out != nullptr) out.param_out = static_cast<char*>(s.param_out) + begin * ElemBytes(s.out_type);
  if (s.m_scale != nullptr) out.m_scale = s.m_scale + begin / kQuantBlockNumel;
  if (s.v_scale != nullptr) out.v_scale = s.v_scale + begin / kQuantBlockNumel;
  out.numel = end - begin;
  return out;
}

// int8 state (block_quant.h): block by block, the moments dequantised into fp32 by
// `dequant` (DequantizeBlock's signature and results), updated by `fp32_update` (the
// variant's fp32 loop, AdamElements' arithmetic), and quantised back by `quant`
// (QuantizeBlock's signature and results, bitwise: the variants' own versions are
// tested against it).
template <typename Fp32Update, typename Dequant, typename Quant>
static inline void AdamInt8Blocks(const AdamSpan& s, const AdamHyper& h, Fp32Update fp32_update, Dequant dequant,
                                  Quant quant) {
  alignas(64) float m[kQuantBlockNumel];
  alignas(64) float v[kQuantBlockNumel];
  for (int64_t b0 = 0; b0 < s.numel; b0 += kQuantBlockNumel) {
    const int64_t n = s.numel - b0 < kQuantBlockNumel ? s.numel - b0 : kQuantBlockNumel;
    const AdamSpan block = SubSpan(s, b0, b0 + n);  // its codes and its one scale per moment
    uint8_t* m_codes = static_cast<uint8_t*>(block.m);
    uint8_t* v_codes = static_cast<uint8_t*>(block.v);
    dequant(m_codes, n, *block.m_scale, QuantCode::kSigned, m);
    dequant(v_codes, n, *block.v_scale, QuantCode::kUnsigned, v);
    AdamSpan f = block;  // the same elements with fp32 moments
    f.m = m;
    f.v = v;
    f.state_type = ElemType::kFp32;
    fp32_update(f, h);
    *block.m_scale = quant(m, n, QuantCode::kSigned, m_codes);
    *block.v_scale = quant(v, n, QuantCode::kUnsigned, v_codes);
  }
}

static inline double SumSquaresElements(const void* grad, ElemType type, int64_t begin, int64_t end) {
  double sum = 0.0;
  for (int64_t i = begin; i < end; ++i) {
    const double g = LoadScalar(grad, type, i);
    sum += g * g;
  }
  return sum;
}

// Entry points of the variants (defined in cpu_adam_<isa>.cc).
void AdamScalar(const AdamSpan& span, const AdamHyper& hyper);
// The variants' block (de)quantisers (DequantizeBlock / QuantizeBlock's results), for tests.
void DequantizeAvx2(const uint8_t* codes, int64_t n, float scale, QuantCode code, float* out);
float QuantizeAvx2(const float* x, int64_t n, QuantCode code, uint8_t* codes);
void DequantizeAvx512(const uint8_t* codes, int64_t n, float scale, QuantCode code, float* out);
// The AVX-512 variant's dequantiser on CPUs with VBMI (byte permutes instead of gathers).
bool CpuHasAvx512Vbmi();
void DequantizeAvx512Vbmi(const uint8_t* codes, int64_t n, float scale, QuantCode code, float* out);
float QuantizeAvx512(const float* x, int64_t n, QuantCode code, uint8_t* codes);
double SumSquaresScalar(const void* grad, ElemType type, int64_t numel);
void AdamAvx2(const AdamSpan& span, const AdamHyper& hyper);
double SumSquaresAvx2(const void* grad, ElemType type, int64_t numel);
void AdamAvx512(const AdamSpan& span, const AdamHyper& hyper);
double SumSquaresAvx512(const void* grad, ElemType type, int64_t numel);

}  // namespace ps::optim::internal
