#include "optim/device_rounding.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>

#ifdef PS_WITH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "optim/device_rounding_cuda.h"
#endif

namespace ps::optim {
namespace {

constexpr int64_t kLow32 = 0xffffffffLL;

// SrHash's Mix on uint32 values held in int64: twice x = ((x >> 16) ^ x) * 0x45d9f3b
// mod 2^32, then x ^ (x >> 16).
at::Tensor Mix(at::Tensor x) {
  for (int round = 0; round < 2; ++round) x = at::bitwise_and(at::bitwise_xor(x.__rshift__(16), x).mul_(0x45d9f3b), kLow32);
  return at::bitwise_xor(x, x.__rshift__(16));
}

void CheckRoundingArgs(const at::Tensor& values, const at::Tensor& out) {
  TORCH_CHECK(values.scalar_type() == at::kFloat && out.scalar_type() == at::kBFloat16 && values.dim() == 1 &&
                  out.dim() == 1 && values.numel() == out.numel() && values.is_contiguous() && out.is_contiguous() &&
                  values.device() == out.device(),
              "StochasticRoundInto: fp32 values and a bf16 output, contiguous, 1-D, of one length on one device");
}

}  // namespace

void StochasticRoundInto(const at::Tensor& values, const at::Tensor& out, int64_t first_index, uint32_t seed) {
#ifdef PS_WITH_CUDA
  if (values.is_cuda()) {
    CheckRoundingArgs(values, out);
    const c10::cuda::CUDAGuard guard(values.device());
    const char* error = LaunchStochasticRound(values.data_ptr<float>(), static_cast<uint16_t*>(out.data_ptr()),
                                              values.numel(), first_index, seed,
                                              c10::cuda::getCurrentCUDAStream().stream());
    TORCH_CHECK(error == nullptr, "StochasticRoundInto: the CUDA kernel did not start: ", error);
    return;
  }
#endif
  StochasticRoundWithOps(values, out, first_index, seed);
}

void StochasticRoundWithOps(const at::Tensor& values, const at::Tensor& out, int64_t first_index, uint32_t seed) {
  CheckRoundingArgs(values, out);
  const at::TensorOptions longs = values.options().dtype(at::kLong);
  for (int64_t at = 0; at < values.numel(); at += kRoundingStepNumel) {
    const int64_t n = std::min(kRoundingStepNumel, values.numel() - at);
    const at::Tensor v = values.narrow(0, at, n);
    // The element's index as the kernels take it: uint32 (the span's index wraps mod 2^32).
    const at::Tensor index = at::bitwise_and(at::arange(first_index + at, first_index + at + n, longs), kLow32);
    const at::Tensor hash = Mix(at::bitwise_xor(Mix(index), static_cast<int64_t>(seed)));
    const at::Tensor bits = at::bitwise_and(v.view(at::kInt).to(at::kLong), kLow32);
    at::Tensor rounded = (bits + hash.__rshift__(16)).__rshift__(16);  // 0 .. 0xff80 for a non-NaN
    rounded = at::where(at::isnan(v), at::scalar_tensor(0x7fc0, longs), rounded);
    rounded -= rounded.__rshift__(15) * 65536;  // the bf16 bit pattern as int16 (two's complement)
    out.narrow(0, at, n).view(at::kShort).copy_(rounded);
  }
}

}  // namespace ps::optim
