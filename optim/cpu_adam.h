// CPU Adam/AdamW over a span of a chunk: the kernels of the hybrid optimizer's host path.
//
// One call updates `numel` consecutive elements of the fp32 master, m and v, reading a
// gradient in fp32, fp16 or bf16 and (optionally) writing the updated parameter in the
// compute dtype in the same pass. m and v are stored in fp32, bf16 or block-wise 8-bit
// (optimizer.state_dtype): the arithmetic is fp32 either way. bf16 moments are widened
// exactly on load and rounded to nearest even on store, so a bf16-state update equals
// the fp32 update of the widened moments with its m and v rounded afterwards. 8-bit
// moments (optim/block_quant.h: m signed, v unsigned, one fp32 scale per
// kQuantBlockNumel elements) are dequantised a block at a time, updated exactly as fp32
// ones, and quantised back: an int8-state update equals the fp32 update of the
// dequantised moments with m and v quantised afterwards. The loss-scale division and the clipping factor are
// folded into `grad_scale`; weight decay is per call (the caller splits a chunk at
// parameter boundaries, which is how the no-decay mask for biases and norms is applied).
//
// Variants: a scalar reference (the spec, always compiled), AVX2+FMA+F16C and AVX-512,
// chosen at run time by CPU features. All variants perform the same IEEE operations in
// the same order (explicit fused multiply-adds, correctly rounded sqrt and division), so
// their results are bitwise identical; tests/optim/cpu_adam_test.cc checks it. Kernels
// are single-threaded; ParallelAdam splits work over threads in aligned ranges.
// This header is free of intrinsic types; the variants live in their own translation
// units compiled with their ISA flags.
#pragma once

#include <cstdint>
#include <vector>

namespace ps::optim {

// kInt8: Adam state only (block-wise 8-bit codes; never a gradient or an output).
enum class ElemType { kFp32, kFp16, kBf16, kInt8 };
enum class CpuIsa { kScalar, kAvx2, kAvx512 };

// Hyper-parameters of one Adam step, precomputed by AdamHyper::Make.
struct AdamHyper {
  float grad_scale = 1.0f;    // gradient multiplier: clip_coef / loss_scale
  float beta1 = 0.9f, beta2 = 0.999f;
  float one_minus_beta1 = 0.1f, one_minus_beta2 = 0.001f;
  float eps = 1e-8f;
  float decay_factor = 1.0f;  // AdamW: 1 - lr * weight_decay (multiplies the parameter)
  float l2 = 0.0f;            // Adam: weight_decay added to the gradient as l2 * param
  float step_size = 1e-3f;    // lr / (1 - beta1^step)
  float inv_sqrt_bias_correction2 = 1.0f;  // 1 / sqrt(1 - beta2^step)

  // `step` is 1-based (the count including this update). adamw selects decoupled decay.
  static AdamHyper Make(double lr, double beta1, double beta2, double eps, double weight_decay,
                        bool adamw, int64_t step, double grad_scale);
};

// One span of consecutive elements. `param_out` may be null (fp32 compute: the master
// is the parameter); otherwise it is written in `out_type` (bf16 and stochastically
// rounded when `master` is null: see sr_seed). `grad` is read in
// `grad_type`; m and v are both in `state_type` (fp32, bf16 or int8). With int8, m and
// v hold one code byte per element and m_scale / v_scale one fp32 scale per block of
// kQuantBlockNumel elements, and the span starts at a block boundary. Pointers need no
// alignment.
struct AdamSpan {
  float* master = nullptr;
  void* m = nullptr;
  void* v = nullptr;
  ElemType state_type = ElemType::kFp32;
  const void* grad = nullptr;
  ElemType grad_type = ElemType::kFp32;
  void* param_out = nullptr;
  ElemType out_type = ElemType::kFp32;
  int64_t numel = 0;
  float* m_scale = nullptr;  // int8 state: [ceil(numel / kQuantBlockNumel)]
  float* v_scale = nullptr;
  // Weights without an fp32 master (optimizer.master_weights none): `master` null,
  // `param_out` bf16 holds the weights, read and written back with stochastic rounding
  // (FloatToBf16Stochastic with SrHash(sr_index + i, sr_seed) for element i).
  uint32_t sr_seed = 0;
  int64_t sr_index = 0;  // the span's first element's index in its stream (its chunk)
};

// Stochastic rounding of master_weights none, the same bits in every variant and on the
// device: a 32-bit hash of an element's index and a seed, Mix(Mix(index) ^ seed) with
// Mix(x): twice x = ((x >> 16) ^ x) * 0x45d9f3b, then x ^ (x >> 16), all mod 2^32 (the
// index mixed before the seed, so another seed is not a permutation of the indices'
// values); and the rounding
// of `value` with its top 16 bits r: bf16 bits (bits(value) + r) >> 16, so a value
// between two bf16 values rounds up with probability (its distance from the lower) /
// (their distance), up to 2^-16; bf16 values stay; NaN gives 0x7fc0.
uint32_t SrHash(uint32_t index, uint32_t seed);
uint16_t FloatToBf16Stochastic(float value, uint32_t hash);

using AdamKernel = void (*)(const AdamSpan& span, const AdamHyper& hyper);
// Sum of squares of `numel` gradient elements (as fp32 values) accumulated in double;
// inf or NaN when any element is inf or NaN (the overflow check).
using SumSquaresKernel = double (*)(const void* grad, ElemType type, int64_t numel);

struct CpuAdamKernels {
  CpuIsa isa = CpuIsa::kScalar;
  AdamKernel adam = nullptr;
  SumSquaresKernel sum_squares = nullptr;
  // CPUs the parallel helpers below pin their threads to (thread t on
  // pin_cpus[t % size], the calling thread only for the call: its own mask is given
  // back after); empty = not pinned (optimizer.pin_cpu_threads; optim/cpu_topology.h).
  std::vector<int> pin_cpus;
};

// The best variant this CPU supports (AVX-512 > AVX2 > scalar).
CpuIsa BestCpuIsa();
bool CpuSupports(CpuIsa isa);
// Kernels of `isa`; throws std::invalid_argument if this CPU does not support it.
CpuAdamKernels KernelsFor(CpuIsa isa);
const char* ToString(CpuIsa isa);
// "auto" | "scalar" | "avx2" | "avx512"; "auto" = BestCpuIsa(). Throws on other names.
CpuIsa ParseCpuIsa(const char* name);

// One unit of work for ParallelAdam: a span and its hyper-parameters.
struct AdamWork {
  AdamSpan span;
  AdamHyper hyper;
};

// Runs every work item with `kernels.adam`, split into pieces of whole
// kQuantBlockNumel-element blocks over `threads` threads (<= 1: on the calling thread). Results do not depend on the
// thread count (each element is updated by exactly one kernel call).
void ParallelAdam(const CpuAdamKernels& kernels, const std::vector<AdamWork>& work, int threads);

// One gradient span for ParallelSumSquares.
struct GradSpan {
  const void* grad = nullptr;
  ElemType type = ElemType::kFp32;
  int64_t numel = 0;
};

// Sum of squares of every span with `kernels.sum_squares`, split like ParallelAdam over
// `threads` threads; partial sums are added in thread order, so the result is
// reproducible for a given thread count. inf/NaN when any element is.
double ParallelSumSquares(const CpuAdamKernels& kernels, const std::vector<GradSpan>& spans, int threads);

// Element conversions used by the kernels (round to nearest even; NaN stays NaN).
float HalfBitsToFloat(uint16_t bits);
uint16_t FloatToHalfBits(float value);
float Bf16BitsToFloat(uint16_t bits);
uint16_t FloatToBf16Bits(float value);

}  // namespace ps::optim
