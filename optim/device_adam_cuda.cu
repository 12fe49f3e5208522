// The fused device update of optim/device_adam_cuda.h. A thread block updates blocks of
// kQuantBlockNumel elements of the pieces in turn, a thread per element: everything an element
// needs is read once and written once; 8-bit moments take the block's largest magnitude
// by a shuffle reduction and their codes by a binary search of the thresholds in shared
// memory (block_quant.h's NearestCode, which QuantizeBlock equals for finite values).
#include "optim/device_adam_cuda.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "optim/block_quant.h"
#include "optim/element_bits.h"

namespace ps::optim {
namespace {

constexpr int kThreads = static_cast<int>(kQuantBlockNumel);
constexpr int kWarps = kThreads / 32;
// Thread blocks per launch: enough resident warps on any current GPU; each strides over
// the launch's blocks.
constexpr int64_t kMaxThreadBlocks = 4096;
static_assert(kThreads % 32 == 0 && kThreads <= 1024, "a quantisation block is one CUDA thread block");

// The kernel's argument (kernel arguments may take 4 KB).
struct Launch {
  int count = 0;
  int64_t first_block[kFusedAdamMaxPieces + 1] = {};
  FusedAdamPiece piece[kFusedAdamMaxPieces];
};
static_assert(sizeof(Launch) <= 4096, "kernel arguments are limited to 4 KB");

__device__ __forceinline__ float Load(const void* base, ElemType type, int64_t i) {
  switch (type) {
    case ElemType::kFp32: return static_cast<const float*>(base)[i];
    case ElemType::kFp16: return internal::ScalarHalfToFloat(static_cast<const uint16_t*>(base)[i]);
    case ElemType::kBf16: return internal::ScalarBf16ToFloat(static_cast<const uint16_t*>(base)[i]);
    case ElemType::kInt8: break;
  }
  return 0.0f;
}

__device__ __forceinline__ void Store(void* base, ElemType type, int64_t i, float value) {
  if (type == ElemType::kFp32) static_cast<float*>(base)[i] = value;
  if (type == ElemType::kBf16) static_cast<uint16_t*>(base)[i] = internal::ScalarFloatToBf16(value);
}

// AdamElement, operation for operation.
__device__ __forceinline__ void Element(float grad, float& p, float& m, float& v, const AdamHyper& h) {
  float g = __fmul_rn(grad, h.grad_scale);
  p = __fmul_rn(p, h.decay_factor);
  g = __fmaf_rn(h.l2, p, g);
  m = __fmaf_rn(h.beta1, m, __fmul_rn(h.one_minus_beta1, g));
  v = __fmaf_rn(h.beta2, v, __fmul_rn(__fmul_rn(h.one_minus_beta2, g), g));
  const float denom = __fmaf_rn(__fsqrt_rn(v), h.inv_sqrt_bias_correction2, h.eps);
  p = __fmaf_rn(-h.step_size, __fdiv_rn(m, denom), p);
}

// The largest of the block's `a` (each >= 0 or NaN; NaN ignored, as QuantizeBlock).
__device__ __forceinline__ float BlockMax(float a, float* shared) {
  for (int offset = 16; offset > 0; offset >>= 1) a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, offset));
  if ((threadIdx.x & 31) == 0) shared[threadIdx.x >> 5] = a;
  __syncthreads();
  float r = shared[0];
  for (int w = 1; w < kWarps; ++w) r = fmaxf(r, shared[w]);
  __syncthreads();  // `shared` is reused by the next call
  return r;
}

// NearestCode: the number of thresholds[1..255] below x.
__device__ __forceinline__ uint8_t Code(float x, const float* thresholds) {
  int lo = 0;
  for (int step = 128; step > 0; step >>= 1) lo += thresholds[lo + step] < x ? step : 0;
  return static_cast<uint8_t>(lo);
}

// One block of kQuantBlockNumel elements of a piece: the code tables in shared memory already
// where the state is 8-bit. Every thread of the thread block calls it (barriers inside).
__device__ __forceinline__ void UpdateBlock(const FusedAdamPiece& p, int64_t block, const float (*values)[256],
                                            const float (*thresholds)[256], float* partial) {
  const int64_t i = block * kThreads + threadIdx.x;
  const bool live = i < p.numel;
  const bool int8 = p.state_type == ElemType::kInt8;  // the same for the whole thread block
  float m = 0.0f, v = 0.0f;
  if (int8) {
    if (live) {
      m = __fmul_rn(values[0][static_cast<const uint8_t*>(p.m)[i]], p.m_scale[block]);
      v = __fmul_rn(values[1][static_cast<const uint8_t*>(p.v)[i]], p.v_scale[block]);
    }
  } else if (live) {
    m = Load(p.m, p.state_type, i);
    v = Load(p.v, p.state_type, i);
  }
  if (live) {
    float w = p.master != nullptr ? p.master[i] : internal::ScalarBf16ToFloat(p.weights[i]);
    Element(Load(p.grad, p.grad_type, i), w, m, v, p.hyper);
    if (p.master != nullptr) {
      p.master[i] = w;
    } else {
      p.weights[i] = internal::ScalarFloatToBf16Stochastic(
          w, internal::ScalarSrHash(static_cast<uint32_t>(p.sr_index + i), p.sr_seed));
    }
    if (!int8) {
      Store(p.m, p.state_type, i, m);
      Store(p.v, p.state_type, i, v);
    }
  }
  if (int8) {  // QuantizeBlock of the block's live elements
    const float m_scale = BlockMax(live ? fabsf(m) : 0.0f, partial);
    const float v_scale = BlockMax(live ? fabsf(v) : 0.0f, partial);
    if (live) {
      static_cast<uint8_t*>(p.m)[i] = Code(m_scale > 0.0f ? __fdiv_rn(m, m_scale) : 0.0f, thresholds[0]);
      static_cast<uint8_t*>(p.v)[i] = Code(v_scale > 0.0f ? __fdiv_rn(v, v_scale) : 0.0f, thresholds[1]);
    }
    if (threadIdx.x == 0) {
      p.m_scale[block] = m_scale;
      p.v_scale[block] = v_scale;
    }
  }
}

// Thread block b takes blocks b, b + gridDim.x, ... of the launch (the code tables are
// read into shared memory once per thread block).
__global__ void __launch_bounds__(kThreads) FusedAdamKernel(const __grid_constant__ Launch launch,
                                                            const FusedAdamCodes codes) {
  __shared__ float values[2][256];
  __shared__ float thresholds[2][256];
  __shared__ float partial[kWarps];
  if (codes.signed_values != nullptr) {  // thresholds[k][j] is threshold j (entry 0 is never read)
    for (int j = threadIdx.x; j < 256; j += kThreads) {
      values[0][j] = codes.signed_values[j];
      values[1][j] = codes.unsigned_values[j];
      thresholds[0][j] = j == 0 ? 0.0f : codes.signed_thresholds[j - 1];
      thresholds[1][j] = j == 0 ? 0.0f : codes.unsigned_thresholds[j - 1];
    }
    __syncthreads();
  }
  const int64_t total = launch.first_block[launch.count];
  int k = 0;  // the piece of `b` (b only grows)
  for (int64_t b = blockIdx.x; b < total; b += gridDim.x) {
    while (launch.first_block[k + 1] <= b) ++k;
    UpdateBlock(launch.piece[k], b - launch.first_block[k], values, thresholds, partial);
  }
}

}  // namespace

const char* LaunchFusedAdam(const std::vector<FusedAdamPiece>& pieces, const FusedAdamCodes& codes, void* stream) {
  for (size_t first = 0; first < pieces.size(); first += kFusedAdamMaxPieces) {
    Launch launch;
    int64_t blocks = 0;
    for (size_t j = first; j < std::min(pieces.size(), first + kFusedAdamMaxPieces); ++j) {
      if (pieces[j].numel <= 0) continue;
      launch.first_block[launch.count] = blocks;
      launch.piece[launch.count++] = pieces[j];
      blocks += (pieces[j].numel + kThreads - 1) / kThreads;
    }
    if (blocks == 0) continue;
    launch.first_block[launch.count] = blocks;
    const unsigned grid = static_cast<unsigned>(std::min(blocks, kMaxThreadBlocks));
    FusedAdamKernel<<<grid, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(launch, codes);
    const cudaError_t status = cudaGetLastError();
    if (status != cudaSuccess) return cudaGetErrorString(status);
  }
  return nullptr;
}

}  // namespace ps::optim
