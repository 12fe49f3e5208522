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
    case ElemType::kInt8: break;  // block-wise state: AdamInt8Blocks
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
    case ElemType::kInt8: return;  // block-wise state: AdamInt8Blocks
  }
}

// ScalarSrMix, 8 lanes (mullo: the low 32 bits of the product, as the scalar's mod 2^32).
inline __m256i Mix(__m256i x, __m256i c) {
  x = _mm256_mullo_epi32(_mm256_xor_si256(_mm256_srli_epi32(x, 16), x), c);
  x = _mm256_mullo_epi32(_mm256_xor_si256(_mm256_srli_epi32(x, 16), x), c);
  return _mm256_xor_si256(_mm256_srli_epi32(x, 16), x);
}

// master_weights none: the weights of elements [index, index + 8) stochastically
// rounded into bf16 (ScalarSrHash and ScalarFloatToBf16Stochastic, 8 lanes).
inline void StoreBf16Stochastic8(void* base, int64_t i, __m256 x, uint32_t index, uint32_t seed) {
  const __m256i c = _mm256_set1_epi32(0x45d9f3b);
  const __m256i idx =
      _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(index)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  __m256i h = _mm256_xor_si256(Mix(idx, c), _mm256_set1_epi32(static_cast<int>(seed)));
  h = Mix(h, c);
  __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_castps_si256(x), _mm256_srli_epi32(h, 16)), 16);
  const __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
  r = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(r), _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc0)), nan));
  const __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(static_cast<uint16_t*>(base) + i), packed);
}

}  // namespace

// DequantizeBlock, 8 lanes: each code's value gathered from the table, times the scale.
void DequantizeAvx2(const uint8_t* codes, int64_t n, float scale, QuantCode code, float* out) {
  const float* values = CodeValues(code).data();
  const __m256 s = _mm256_set1_ps(scale);
  const int64_t vec_end = n - n % 8;
  for (int64_t i = 0; i < vec_end; i += 8) {
    const __m256i idx = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + i)));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_i32gather_ps(values, idx, 4), s));
  }
  for (int64_t i = vec_end; i < n; ++i) out[i] = values[codes[i]] * scale;
}

// QuantizeBlock, 8 lanes: the same largest magnitude (max with the running value second,
// so a NaN is ignored as there), the same division and bucket look-up (block_quant.h).
float QuantizeAvx2(const float* x, int64_t n, QuantCode code, uint8_t* codes) {
  const int64_t vec_end = n - n % 8;
  const __m256i magnitude_mask = _mm256_set1_epi32(0x7fffffff);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < vec_end; i += 8) {
    const __m256 a = _mm256_castsi256_ps(_mm256_and_si256(_mm256_castps_si256(_mm256_loadu_ps(x + i)), magnitude_mask));
    acc = _mm256_max_ps(a, acc);
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, acc);
  float scale = 0.0f;
  for (float a : lanes) scale = scale < a ? a : scale;
  for (int64_t i = vec_end; i < n; ++i) {
    const float a = __builtin_fabsf(x[i]);
    scale = scale < a ? a : scale;
  }
  const QuantBuckets& b = BucketsOf(code);
  const __m256 s = _mm256_set1_ps(scale);
  const __m256i min_exponent = _mm256_set1_epi32(QuantBuckets::kMinExponent);
  for (int64_t i = 0; i < vec_end; i += 8) {
    const __m256 xn = scale > 0.0f ? _mm256_div_ps(_mm256_loadu_ps(x + i), s) : _mm256_setzero_ps();
    const __m256i bits = _mm256_castps_si256(xn);
    const __m256i mag = _mm256_and_si256(bits, magnitude_mask);
    const __m256i exponent = _mm256_min_epu32(_mm256_srli_epi32(mag, 23), _mm256_set1_epi32(127));
    // exponent < kMinExponent (both below 2^31: a signed comparison is exact)
    const __m256i small = _mm256_cmpgt_epi32(min_exponent, exponent);
    __m256i k = _mm256_add_epi32(_mm256_set1_epi32(1),
                                 _mm256_add_epi32(_mm256_slli_epi32(_mm256_sub_epi32(exponent, min_exponent), 7),
                                                  _mm256_and_si256(_mm256_srli_epi32(mag, 16), _mm256_set1_epi32(127))));
    k = _mm256_andnot_si256(small, k);
    const __m256i negative = _mm256_srai_epi32(bits, 31);  // all ones for x < 0
    k = _mm256_add_epi32(k, _mm256_and_si256(negative, _mm256_set1_epi32(QuantBuckets::kCount)));
    // PackedCode: one gather of base << 17 | key, then key < y (both below 2^17: signed compare).
    const __m256i word = _mm256_i32gather_epi32(reinterpret_cast<const int*>(b.packed.data()), k, 4);
    const __m256i y = _mm256_and_si256(_mm256_xor_si256(bits, negative), _mm256_set1_epi32(0xffff));
    const __m256i base = _mm256_srli_epi32(word, QuantBuckets::kKeyBits);
    const __m256i above = _mm256_cmpgt_epi32(
        y, _mm256_and_si256(word, _mm256_set1_epi32((1 << QuantBuckets::kKeyBits) - 1)));  // all ones: -1
    const __m256i c = _mm256_sub_epi32(base, above);  // 0 .. 255: the packs keep them
    const __m128i c16 = _mm_packus_epi32(_mm256_castsi256_si128(c), _mm256_extracti128_si256(c, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(codes + i), _mm_packus_epi16(c16, c16));
  }
  for (int64_t i = vec_end; i < n; ++i) {
    const float xn = scale > 0.0f ? x[i] / scale : 0.0f;
    const int k = BucketIndex(FloatBits(xn));
    codes[i] = static_cast<uint8_t>(b.base[k] + (b.threshold[k] < xn ? 1 : 0));
  }
  return scale;
}

// The vector loop with m and v in kState (a template argument: no per-element branch
// in the fp32 path, which runs at copy bandwidth).
// kNoMaster (master_weights none): the weights are param_out's bf16 values, stored
// stochastically rounded.
template <ElemType kState, bool kNoMaster>
static void AdamLoop(const AdamSpan& s, const AdamHyper& h) {
  const __m256 grad_scale = _mm256_set1_ps(h.grad_scale), decay = _mm256_set1_ps(h.decay_factor);
  const __m256 l2 = _mm256_set1_ps(h.l2), beta1 = _mm256_set1_ps(h.beta1), beta2 = _mm256_set1_ps(h.beta2);
  const __m256 omb1 = _mm256_set1_ps(h.one_minus_beta1), omb2 = _mm256_set1_ps(h.one_minus_beta2);
  const __m256 eps = _mm256_set1_ps(h.eps), inv_bc2 = _mm256_set1_ps(h.inv_sqrt_bias_correction2);
  const __m256 neg_step = _mm256_set1_ps(-h.step_size);
  const int64_t vec_end = s.numel - s.numel % 8;
  for (int64_t i = 0; i < vec_end; i += 8) {
    __m256 g = _mm256_mul_ps(Load8(s.grad, s.grad_type, i), grad_scale);
    __m256 p = _mm256_mul_ps(kNoMaster ? Load8(s.param_out, ElemType::kBf16, i) : _mm256_loadu_ps(s.master + i), decay);
    g = _mm256_fmadd_ps(l2, p, g);
    const __m256 m = _mm256_fmadd_ps(beta1, Load8(s.m, kState, i), _mm256_mul_ps(omb1, g));
    const __m256 v = _mm256_fmadd_ps(beta2, Load8(s.v, kState, i), _mm256_mul_ps(_mm256_mul_ps(omb2, g), g));
    const __m256 denom = _mm256_fmadd_ps(_mm256_sqrt_ps(v), inv_bc2, eps);
    p = _mm256_fmadd_ps(neg_step, _mm256_div_ps(m, denom), p);
    Store8(s.m, kState, i, m);
    Store8(s.v, kState, i, v);
    if constexpr (kNoMaster) {
      StoreBf16Stochastic8(s.param_out, i, p, static_cast<uint32_t>(s.sr_index + i), s.sr_seed);
    } else {
      _mm256_storeu_ps(s.master + i, p);
      if (s.param_out != nullptr) Store8(s.param_out, s.out_type, i, p);
    }
  }
  AdamElements(s, h, vec_end, s.numel);
}

void AdamAvx2(const AdamSpan& s, const AdamHyper& h) {
  const bool none = s.master == nullptr;  // master_weights none
  if (s.state_type == ElemType::kInt8) {
    AdamInt8Blocks(s, h, none ? AdamLoop<ElemType::kFp32, true> : AdamLoop<ElemType::kFp32, false>, DequantizeAvx2,
                   QuantizeAvx2);
  } else if (s.state_type == ElemType::kBf16) {
    none ? AdamLoop<ElemType::kBf16, true>(s, h) : AdamLoop<ElemType::kBf16, false>(s, h);
  } else {
    none ? AdamLoop<ElemType::kFp32, true>(s, h) : AdamLoop<ElemType::kFp32, false>(s, h);
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
