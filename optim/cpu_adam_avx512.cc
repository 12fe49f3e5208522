// AVX-512 (F, BW, VL, DQ) variant of the CPU Adam kernels (16 lanes; the tail uses the
// scalar element code compiled with these flags). Only called after a CPU feature check.
#include <immintrin.h>

#include "optim/cpu_adam_element.h"

namespace ps::optim::internal {
namespace {

inline __m512 Load16(const void* base, ElemType type, int64_t i) {
  switch (type) {
    case ElemType::kFp32: return _mm512_loadu_ps(static_cast<const float*>(base) + i);
    case ElemType::kFp16:
      return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(base) + i)));
    case ElemType::kBf16: {
      const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(base) + i));
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
    }
    case ElemType::kInt8: break;  // block-wise state: AdamInt8Blocks
  }
  return _mm512_setzero_ps();
}

inline void Store16(void* base, ElemType type, int64_t i, __m512 x) {
  switch (type) {
    case ElemType::kFp32: _mm512_storeu_ps(static_cast<float*>(base) + i, x); return;
    case ElemType::kFp16:
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(static_cast<uint16_t*>(base) + i),
                          _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
      return;
    case ElemType::kBf16: {
      const __m512i bits = _mm512_castps_si512(x);
      const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
      __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(bits, _mm512_set1_epi32(0x7fff)), lsb), 16);
      const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
      r = _mm512_mask_mov_epi32(r, nan, _mm512_set1_epi32(0x7fc0));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(static_cast<uint16_t*>(base) + i), _mm512_cvtepi32_epi16(r));
      return;
    }
    case ElemType::kInt8: return;  // block-wise state: AdamInt8Blocks
  }
}

// ScalarSrMix, 16 lanes (mullo: the low 32 bits of the product, as the scalar's mod 2^32).
inline __m512i Mix(__m512i x, __m512i c) {
  x = _mm512_mullo_epi32(_mm512_xor_si512(_mm512_srli_epi32(x, 16), x), c);
  x = _mm512_mullo_epi32(_mm512_xor_si512(_mm512_srli_epi32(x, 16), x), c);
  return _mm512_xor_si512(_mm512_srli_epi32(x, 16), x);
}

// master_weights none: the weights of elements [index, index + 16) stochastically
// rounded into bf16 (ScalarSrHash and ScalarFloatToBf16Stochastic, 16 lanes).
inline void StoreBf16Stochastic16(void* base, int64_t i, __m512 x, uint32_t index, uint32_t seed) {
  const __m512i c = _mm512_set1_epi32(0x45d9f3b);
  const __m512i idx = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(index)),
                                       _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  __m512i h = _mm512_xor_si512(Mix(idx, c), _mm512_set1_epi32(static_cast<int>(seed)));
  h = Mix(h, c);
  __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_castps_si512(x), _mm512_srli_epi32(h, 16)), 16);
  r = _mm512_mask_mov_epi32(r, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), _mm512_set1_epi32(0x7fc0));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(static_cast<uint16_t*>(base) + i), _mm512_cvtepi32_epi16(r));
}

}  // namespace

// DequantizeBlock, 16 lanes: each code's value gathered from the table, times the scale.
// (Eight two-register permutes and three blends instead of the gather measured slower.)
void DequantizeAvx512(const uint8_t* codes, int64_t n, float scale, QuantCode code, float* out) {
  const float* values = CodeValues(code).data();
  const __m512 s = _mm512_set1_ps(scale);
  const int64_t vec_end = n - n % 16;
  for (int64_t i = 0; i < vec_end; i += 16) {
    const __m512i idx = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + i)));
    _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_i32gather_ps(idx, values, 4), s));
  }
  for (int64_t i = vec_end; i < n; ++i) out[i] = values[codes[i]] * scale;
}

// DequantizeBlock with AVX-512 VBMI, 64 codes at a time and no gather: the code table's
// fp32 values as four byte planes (plane b holds byte b of each value: 256 bytes, four
// registers), each looked up with two two-register byte permutes (a code's low seven
// bits) and a blend (its top bit), then the planes interleaved back into fp32. The
// interleave leaves 128-bit lane L of output q with elements 16L + 4q .. + 3, so the codes
// are first transposed as a 4 x 4 grid of four-byte groups, which puts them in order.
namespace {

struct VbmiPlanes {
  __m512i plane[4][4];  // [byte of the value][64 codes: 0-63, 64-127, 128-191, 192-255]
};

__attribute__((target("avx512f,avx512bw,avx512vbmi"))) VbmiPlanes MakeVbmiPlanes(QuantCode code) {
  alignas(64) uint8_t bytes[4][256];
  const std::array<float, 256>& values = CodeValues(code);
  for (int c = 0; c < 256; ++c) {
    const uint32_t bits = FloatBits(values[c]);
    for (int b = 0; b < 4; ++b) bytes[b][c] = static_cast<uint8_t>(bits >> (8 * b));
  }
  VbmiPlanes p;
  for (int b = 0; b < 4; ++b) {
    for (int q = 0; q < 4; ++q) p.plane[b][q] = _mm512_load_si512(bytes[b] + 64 * q);
  }
  return p;
}

}  // namespace

__attribute__((target("avx512f,avx512bw,avx512vbmi"))) void DequantizeAvx512Vbmi(const uint8_t* codes, int64_t n,
                                                                                float scale, QuantCode code,
                                                                                float* out) {
  static const VbmiPlanes kSigned = MakeVbmiPlanes(QuantCode::kSigned);
  static const VbmiPlanes kUnsigned = MakeVbmiPlanes(QuantCode::kUnsigned);
  const VbmiPlanes& t = code == QuantCode::kSigned ? kSigned : kUnsigned;
  const __m512 s = _mm512_set1_ps(scale);
  const __m512i transpose = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  const int64_t vec_end = n - n % 64;
  for (int64_t i = 0; i < vec_end; i += 64) {
    const __m512i idx = _mm512_permutexvar_epi32(transpose, _mm512_loadu_si512(codes + i));
    const __mmask64 high = _mm512_movepi8_mask(idx);
    __m512i r[4];
    for (int b = 0; b < 4; ++b) {
      r[b] = _mm512_mask_blend_epi8(high, _mm512_permutex2var_epi8(t.plane[b][0], idx, t.plane[b][1]),
                                    _mm512_permutex2var_epi8(t.plane[b][2], idx, t.plane[b][3]));
    }
    const __m512i lo01 = _mm512_unpacklo_epi8(r[0], r[1]), hi01 = _mm512_unpackhi_epi8(r[0], r[1]);
    const __m512i lo23 = _mm512_unpacklo_epi8(r[2], r[3]), hi23 = _mm512_unpackhi_epi8(r[2], r[3]);
    const __m512i f[4] = {_mm512_unpacklo_epi16(lo01, lo23), _mm512_unpackhi_epi16(lo01, lo23),
                          _mm512_unpacklo_epi16(hi01, hi23), _mm512_unpackhi_epi16(hi01, hi23)};
    for (int q = 0; q < 4; ++q) _mm512_storeu_ps(out + i + 16 * q, _mm512_mul_ps(_mm512_castsi512_ps(f[q]), s));
  }
  DequantizeAvx512(codes + vec_end, n - vec_end, scale, code, out + vec_end);
}

// QuantizeBlock, 16 lanes: the same largest magnitude (max with the running value second,
// so a NaN is ignored as there), the same division and bucket look-up (block_quant.h).
float QuantizeAvx512(const float* x, int64_t n, QuantCode code, uint8_t* codes) {
  const int64_t vec_end = n - n % 16;
  const __m512i magnitude_mask = _mm512_set1_epi32(0x7fffffff);
  __m512 acc = _mm512_setzero_ps();
  for (int64_t i = 0; i < vec_end; i += 16) {
    const __m512 a = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(_mm512_loadu_ps(x + i)), magnitude_mask));
    acc = _mm512_max_ps(a, acc);
  }
  float scale = _mm512_reduce_max_ps(acc);
  for (int64_t i = vec_end; i < n; ++i) {
    const float a = __builtin_fabsf(x[i]);
    scale = scale < a ? a : scale;
  }
  const QuantBuckets& b = BucketsOf(code);
  const __m512 s = _mm512_set1_ps(scale);
  const __m512i min_exponent = _mm512_set1_epi32(QuantBuckets::kMinExponent);
  for (int64_t i = 0; i < vec_end; i += 16) {
    const __m512 xn = scale > 0.0f ? _mm512_div_ps(_mm512_loadu_ps(x + i), s) : _mm512_setzero_ps();
    const __m512i bits = _mm512_castps_si512(xn);
    const __m512i mag = _mm512_and_si512(bits, magnitude_mask);
    const __m512i exponent = _mm512_min_epu32(_mm512_srli_epi32(mag, 23), _mm512_set1_epi32(127));
    const __mmask16 small = _mm512_cmplt_epu32_mask(exponent, min_exponent);
    __m512i k = _mm512_add_epi32(_mm512_set1_epi32(1),
                                 _mm512_add_epi32(_mm512_slli_epi32(_mm512_sub_epi32(exponent, min_exponent), 7),
                                                  _mm512_and_si512(_mm512_srli_epi32(mag, 16), _mm512_set1_epi32(127))));
    k = _mm512_mask_mov_epi32(k, small, _mm512_setzero_si512());
    const __m512i negative = _mm512_srai_epi32(bits, 31);  // all ones for x < 0
    k = _mm512_add_epi32(k, _mm512_and_si512(negative, _mm512_set1_epi32(QuantBuckets::kCount)));
    // PackedCode: one gather of base << 17 | key, then key < y.
    const __m512i word = _mm512_i32gather_epi32(k, b.packed.data(), 4);
    const __m512i y = _mm512_and_si512(_mm512_xor_si512(bits, negative), _mm512_set1_epi32(0xffff));
    const __m512i base = _mm512_srli_epi32(word, QuantBuckets::kKeyBits);
    const __mmask16 above =
        _mm512_cmplt_epi32_mask(_mm512_and_si512(word, _mm512_set1_epi32((1 << QuantBuckets::kKeyBits) - 1)), y);
    const __m512i c = _mm512_mask_add_epi32(base, above, base, _mm512_set1_epi32(1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + i), _mm512_cvtepi32_epi8(c));
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
  const __m512 grad_scale = _mm512_set1_ps(h.grad_scale), decay = _mm512_set1_ps(h.decay_factor);
  const __m512 l2 = _mm512_set1_ps(h.l2), beta1 = _mm512_set1_ps(h.beta1), beta2 = _mm512_set1_ps(h.beta2);
  const __m512 omb1 = _mm512_set1_ps(h.one_minus_beta1), omb2 = _mm512_set1_ps(h.one_minus_beta2);
  const __m512 eps = _mm512_set1_ps(h.eps), inv_bc2 = _mm512_set1_ps(h.inv_sqrt_bias_correction2);
  const __m512 neg_step = _mm512_set1_ps(-h.step_size);
  const int64_t vec_end = s.numel - s.numel % 16;
  for (int64_t i = 0; i < vec_end; i += 16) {
    __m512 g = _mm512_mul_ps(Load16(s.grad, s.grad_type, i), grad_scale);
    __m512 p = _mm512_mul_ps(kNoMaster ? Load16(s.param_out, ElemType::kBf16, i) : _mm512_loadu_ps(s.master + i), decay);
    g = _mm512_fmadd_ps(l2, p, g);
    const __m512 m = _mm512_fmadd_ps(beta1, Load16(s.m, kState, i), _mm512_mul_ps(omb1, g));
    const __m512 v = _mm512_fmadd_ps(beta2, Load16(s.v, kState, i), _mm512_mul_ps(_mm512_mul_ps(omb2, g), g));
    const __m512 denom = _mm512_fmadd_ps(_mm512_sqrt_ps(v), inv_bc2, eps);
    p = _mm512_fmadd_ps(neg_step, _mm512_div_ps(m, denom), p);
    Store16(s.m, kState, i, m);
    Store16(s.v, kState, i, v);
    if constexpr (kNoMaster) {
      StoreBf16Stochastic16(s.param_out, i, p, static_cast<uint32_t>(s.sr_index + i), s.sr_seed);
    } else {
      _mm512_storeu_ps(s.master + i, p);
      if (s.param_out != nullptr) Store16(s.param_out, s.out_type, i, p);
    }
  }
  AdamElements(s, h, vec_end, s.numel);
}

void AdamAvx512(const AdamSpan& s, const AdamHyper& h) {
  const bool none = s.master == nullptr;  // master_weights none
  if (s.state_type == ElemType::kInt8) {
    static const bool vbmi = CpuHasAvx512Vbmi();
    AdamInt8Blocks(s, h, none ? AdamLoop<ElemType::kFp32, true> : AdamLoop<ElemType::kFp32, false>,
                   vbmi ? DequantizeAvx512Vbmi : DequantizeAvx512, QuantizeAvx512);
  } else if (s.state_type == ElemType::kBf16) {
    none ? AdamLoop<ElemType::kBf16, true>(s, h) : AdamLoop<ElemType::kBf16, false>(s, h);
  } else {
    none ? AdamLoop<ElemType::kFp32, true>(s, h) : AdamLoop<ElemType::kFp32, false>(s, h);
  }
}

double SumSquaresAvx512(const void* grad, ElemType type, int64_t numel) {
  __m512d acc0 = _mm512_setzero_pd(), acc1 = _mm512_setzero_pd();
  const int64_t vec_end = numel - numel % 16;
  for (int64_t i = 0; i < vec_end; i += 16) {
    const __m512 g = Load16(grad, type, i);
    const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(g));
    const __m512d hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(g), 1)));
    acc0 = _mm512_fmadd_pd(lo, lo, acc0);
    acc1 = _mm512_fmadd_pd(hi, hi, acc1);
  }
  return _mm512_reduce_add_pd(_mm512_add_pd(acc0, acc1)) + SumSquaresElements(grad, type, vec_end, numel);
}

}  // namespace ps::optim::internal
