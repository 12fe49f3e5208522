// Stochastic rounding of fp32 values into bf16: the device update's store for weights
// without an fp32 master (optimizer.master_weights none). Bitwise the CPU kernels'
// FloatToBf16Stochastic(value, SrHash(index, seed)) (optim/cpu_adam.h) on every path:
// CUDA tensors in a --config=cuda build take one CUDA kernel (device_rounding_cuda.h, 6
// bytes moved per element); any other device, LibTorch ops, whose hash and rounding are
// integer operations that int64 tensors compute exactly (each product below 2^59,
// reduced mod 2^32).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace ps::optim {

// Elements per step of int64 temporaries (at most 48 bytes per element live at once).
constexpr int64_t kRoundingStepNumel = int64_t{1} << 20;

// out[i] = FloatToBf16Stochastic(values[i], SrHash(first_index + i, seed)) for i in
// [0, numel): `values` fp32, `out` bf16, both contiguous 1-D of one length on one device.
// On the stream current for the tensors' device (CUDA). c10::Error on mismatched tensors.
void StochasticRoundInto(const at::Tensor& values, const at::Tensor& out, int64_t first_index, uint32_t seed);

// The same in LibTorch ops on any device (the path of non-CUDA tensors; on CUDA, the
// reference tools/bench_device_rounding checks the kernel against).
void StochasticRoundWithOps(const at::Tensor& values, const at::Tensor& out, int64_t first_index, uint32_t seed);

}  // namespace ps::optim
