// The CUDA kernel of optim/device_rounding_cuda.h: one pass, 4 bytes read and 2 written
// per element (no temporaries).
#include "optim/device_rounding_cuda.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "optim/element_bits.h"

namespace ps::optim {
namespace {

// Grid-stride: element i's index is first_index + i mod 2^32, as the CPU kernels' uint32.
__global__ void StochasticRoundKernel(const float* __restrict__ values, uint16_t* __restrict__ out, int64_t numel,
                                      uint32_t first_index, uint32_t seed) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < numel; i += stride) {
    out[i] = internal::ScalarFloatToBf16Stochastic(values[i],
                                                   internal::ScalarSrHash(first_index + static_cast<uint32_t>(i), seed));
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
