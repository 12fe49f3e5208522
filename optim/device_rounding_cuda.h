// Stochastic rounding of fp32 into bf16 in one CUDA kernel (device_rounding_cuda.cu,
// compiled by nvcc in --config=cuda only): the bits of FloatToBf16Stochastic(values[i],
// SrHash(first_index + i, seed)) (optim/cpu_adam.h), computed in uint32 arithmetic as the
// CPU kernels do. No LibTorch and no CUDA headers here: device_rounding.cc passes raw
// device pointers and its current stream.
#pragma once

#include <cstdint>

namespace ps::optim {

// Launches the kernel on `stream` (a cudaStream_t) for out[i], i in [0, numel): `values`
// and `out` device pointers on the current device. Returns null, or the CUDA error's text
// when the launch failed.
const char* LaunchStochasticRound(const float* values, uint16_t* out, int64_t numel, int64_t first_index,
                                  uint32_t seed, void* stream);

}  // namespace ps::optim
