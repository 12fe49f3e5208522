// AVX2 + FMA + F16C variant of the CPU Adam kernels (8 lanes; the tail uses the scalar
// element code, compiled here with the same flags). Built with -mavx2 -mfma -mf16c and
// only called after a CPU feature check.
#include <immintrin.h>

#include "optim/cpu_adam_element.h"

namespace ps::optim::internal {
namespace {

inline __m256 Load8(const void* base, ElemType type, int64_t i) {
  switch (type) {
    case ElemType::kFp32: return _mm256_loadu_ps(static_cast<const float*>(base) + i);
    case ElemType::kFp16:
      return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(base) + i)));
    case ElemType::kBf16: {
      const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(base) + i));
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(raw), 16));
    }
  }
  return _mm256_setzero_ps();
}

inline void Store8(void* base, ElemType type, int64_t i, __m256 x) {
  switch (type) {
    case ElemType::kFp32: _mm256_storeu_ps(static_cast<float*>(base) + i, x); return;
    case ElemType::kFp16:
      _mm_storeu_si128(reinterpret_cast<__m128i*>(static_cast<uint16_t*>(base) + i),
                       _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
      return;
    case ElemType::kBf16: {
      const __m256i bits = _mm256_castps_si256(x);
      const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
      __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(bits, _mm256_set1_epi32(0x7fff)), lsb), 16);
      const __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
      r = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(r), _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc0)), nan));
      const __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(static_cast<uint16_t*>(base) + i), packed);
      return;
    }
  }
}

}  // namespace

// The vector loop with m and v in kState (a template argument: no per-element branch
// in the fp32 path, which runs at copy bandwidth).
template <ElemType kState>
static void AdamLoop(const AdamSpan& s, const AdamHyper& h) {
  const __m256 grad_scale = _mm256_set1_ps(h.grad_scale), decay = _mm256_set1_ps(h.decay_factor);
  const __m256 l2 = _mm256_set1_ps(h.l2), beta1 = _mm256_set1_ps(h.beta1), beta2 = _mm256_set1_ps(h.beta2);
  const __m256 omb1 = _mm256_set1_ps(h.one_minus_beta1), omb2 = _mm256_set1_ps(h.one_minus_beta2);
  const __m256 eps = _mm256_set1_ps(h.eps), inv_bc2 = _mm256_set1_ps(h.inv_sqrt_bias_correction2);
  const __m256 neg_step = _mm256_set1_ps(-h.step_size);
  const int64_t vec_end = s.numel - s.numel % 8;
  for (int64_t i = 0; i < vec_end; i += 8) {
    __m256 g = _mm256_mul_ps(Load8(s.grad, s.grad_type, i), grad_scale);
    __m256 p = _mm256_mul_ps(_mm256_loadu_ps(s.master + i), decay);
    g = _mm256_fmadd_ps(l2, p, g);
    const __m256 m = _mm256_fmadd_ps(beta1, Load8(s.m, kState, i), _mm256_mul_ps(omb1, g));
    const __m256 v = _mm256_fmadd_ps(beta2, Load8(s.v, kState, i), _mm256_mul_ps(_mm256_mul_ps(omb2, g), g));
    const __m256 denom = _mm256_fmadd_ps(_mm256_sqrt_ps(v), inv_bc2, eps);
    p = _mm256_fmadd_ps(neg_step, _mm256_div_ps(m, denom), p);
    Store8(s.m, kState, i, m);
    Store8(s.v, kState, i, v);
    _mm256_storeu_ps(s.master + i, p);
    if (s.param_out != nullptr) Store8(s.param_out, s.out_type, i, p);
  }
  AdamElements(s, h, vec_end, s.numel);
}

void AdamAvx2(const AdamSpan& s, const AdamHyper& h) {
  if (s.state_type == ElemType::kBf16) {
    AdamLoop<ElemType::kBf16>(s, h);
  } else {
    AdamLoop<ElemType::kFp32>(s, h);
  }
}

double SumSquaresAvx2(const void* grad, ElemType type, int64_t numel) {
  __m256d acc0 = _mm256_setzero_pd(), acc1 = _mm256_setzero_pd();
  const int64_t vec_end = numel - numel % 8;
  for (int64_t i = 0; i < vec_end; i += 8) {
    const __m256 g = Load8(grad, type, i);
    const __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(g));
    const __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(g, 1));
    acc0 = _mm256_fmadd_pd(lo, lo, acc0);
    acc1 = _mm256_fmadd_pd(hi, hi, acc1);
  }
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes, _mm256_add_pd(acc0, acc1));
  return lanes[0] + lanes[1] + lanes[2] + lanes[3] + SumSquaresElements(grad, type, vec_end, numel);
}

}  // namespace ps::optim::internal
