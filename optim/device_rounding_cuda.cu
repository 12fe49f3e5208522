// The CUDA kernel of optim/device_rounding_cuda.h: one pass, 4 bytes read and 2 written
// per element (no temporaries).
#include "optim/device_rounding_cuda.h"

#include <cuda_runtime.h>

#include <algorithm>

namespace ps::optim {
namespace {

__device__ __forceinline__ uint32_t SrMix(uint32_t x) {
  x = ((x >> 16) ^ x) * 0x45d9f3bu;
  x = ((x >> 16) ^ x) * 0x45d9f3bu;
  return (x >> 16) ^ x;
}

// Grid-stride: element i's index is first_index + i mod 2^32, as the CPU kernels' uint32.
__global__ void StochasticRoundKernel(const float* __restrict__ values, uint16_t* __restrict__ out, int64_t numel,
                                      uint32_t first_index, uint32_t seed) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < numel; i += stride) {
    const uint32_t bits = __float_as_uint(values[i]);
    const uint32_t hash = SrMix(SrMix(first_index + static_cast<uint32_t>(i)) ^ seed);
    // NaN gives 0x7fc0; otherwise bits + (hash >> 16) stays below 2^32 (bits <= 0xff800000).
    out[i] = (bits & 0x7fffffffu) > 0x7f800000u ? uint16_t{0x7fc0} : static_cast<uint16_t>((bits + (hash >> 16)) >> 16);
  }
}

}  // namespace

const char* LaunchStochasticRound(const float* values, uint16_t* out, int64_t numel, int64_t first_index,
                                  uint32_t seed, void* stream) {
  if (numel <= 0) return nullptr;
  constexpr int kThreads = 256;
  constexpr int64_t kMaxBlocks = 16384;  // enough resident warps on any current GPU; the rest strides
  const int blocks = static_cast<int>(std::min<int64_t>((numel + kThreads - 1) / kThreads, kMaxBlocks));
  StochasticRoundKernel<<<blocks, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      values, out, numel, static_cast<uint32_t>(first_index), seed);
  const cudaError_t status = cudaGetLastError();
  return status == cudaSuccess ? nullptr : cudaGetErrorString(status);
}

}  // namespace ps::optim
