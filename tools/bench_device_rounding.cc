// Check and benchmark (not a test) of the device update's stochastic rounding on a CUDA
// GPU (optim/device_rounding.h), for a --config=cuda build on the GPU machine:
//   1. equality: StochasticRoundInto on CUDA tensors (the CUDA kernel) against the CPU
//      specification FloatToBf16Stochastic(value, SrHash(index, seed)) element by element,
//      and against the LibTorch-ops form on the same device, bit for bit, on random values
//      of every magnitude with zeros, infinities and NaN, at first indices that wrap past
//      2^32;
//   2. speed: the kernel and the ops form on `--numel` elements against a device copy of
//      the same bytes (fp32 in, bf16 out: 6 bytes per element), best of `--iters`.
// Exit status 0 only when every comparison is equal. The last line is one JSON object.
// Without CUDA it says so and exits 2.
#include <ATen/ATen.h>
#include <cxxopts.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <utility>

#include "optim/cpu_adam.h"
#include "optim/device_rounding.h"

#ifdef PS_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace {

using ps::optim::FloatToBf16Stochastic;
using ps::optim::SrHash;

// Random fp32 values over many binades, with the special values at fixed places.
at::Tensor TestValues(int64_t numel) {
  at::Tensor values = at::randn({numel}) * at::exp(at::randn({numel}) * 8);
  const float specials[] = {0.0f, -0.0f, std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
                            std::numeric_limits<float>::denorm_min(), 1.0f, -3.0f};
  float* v = values.data_ptr<float>();
  for (int k = 0; k < 10; ++k) v[(k * 997) % numel] = specials[k];
  return values;
}

// Elements whose CUDA result differs from the specification or from the ops form.
int64_t Mismatches(const at::Tensor& values_cpu, int64_t first, uint32_t seed) {
  const int64_t n = values_cpu.numel();
  const at::Tensor values = values_cpu.to(at::kCUDA);
  at::Tensor kernel = at::empty({n}, values.options().dtype(at::kBFloat16));
  at::Tensor ops = at::empty_like(kernel);
  ps::optim::StochasticRoundInto(values, kernel, first, seed);
  ps::optim::StochasticRoundWithOps(values, ops, first, seed);
  const at::Tensor k = kernel.cpu(), o = ops.cpu();
  const float* v = values_cpu.data_ptr<float>();
  const auto* kb = static_cast<const uint16_t*>(k.data_ptr());
  const auto* ob = static_cast<const uint16_t*>(o.data_ptr());
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t want = FloatToBf16Stochastic(v[i], SrHash(static_cast<uint32_t>(first + i), seed));
    if (kb[i] != want || ob[i] != want) ++bad;
  }
  return bad;
}

void Synchronize() {
#ifdef PS_WITH_CUDA
  c10::cuda::device_synchronize();
#endif
}

// Best of `iters` timed runs of `fn` in milliseconds (the device synchronised around each).
double BestMs(int iters, const std::function<void()>& fn) {
  double best = std::numeric_limits<double>::infinity();
  for (int i = 0; i <= iters; ++i) {  // the first is a warm-up
    Synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    Synchronize();
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (i > 0) best = std::min(best, ms);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  cxxopts::Options options("bench_device_rounding", "the CUDA stochastic-rounding kernel: equality and speed");
  options.add_options()("numel", "elements of the timed runs", cxxopts::value<int64_t>()->default_value("268435456"))(
      "check-numel", "elements of each equality check", cxxopts::value<int64_t>()->default_value("16781315"))(
      "iters", "timed iterations (best is reported)", cxxopts::value<int>()->default_value("5"))("help", "usage");
  const auto args = options.parse(argc, argv);
  if (args.count("help")) {
    std::printf("%s\n", options.help().c_str());
    return 0;
  }
  if (!at::hasCUDA()) {
    std::fprintf(stderr, "bench_device_rounding: no CUDA device (build with --config=cuda, run on a GPU)\n");
    return 2;
  }
  at::manual_seed(1234);
  const at::Tensor check_values = TestValues(args["check-numel"].as<int64_t>());
  int64_t mismatches = 0;
  for (const auto& [first, seed] : {std::pair<int64_t, uint32_t>{0, 0u}, {123456, 0xdeadbeefu},
                                    {(int64_t{1} << 32) - 1000, 7u}}) {  // the last wraps past 2^32
    const int64_t bad = Mismatches(check_values, first, seed);
    std::printf("equality: first index %lld, seed %u: %lld of %lld elements differ\n", static_cast<long long>(first),
                seed, static_cast<long long>(bad), static_cast<long long>(check_values.numel()));
    mismatches += bad;
  }

  const int64_t n = args["numel"].as<int64_t>();
  const int iters = args["iters"].as<int>();
  const at::Tensor values = at::randn({n}, at::TensorOptions().device(at::kCUDA));
  at::Tensor out = at::empty({n}, values.options().dtype(at::kBFloat16));
  at::Tensor copy_src = at::empty({n * 3}, out.options());  // 6 bytes per element: read 4, write 2
  at::Tensor copy_dst = at::empty({n * 3}, out.options());
  const double kernel_ms = BestMs(iters, [&] { ps::optim::StochasticRoundInto(values, out, 0, 99u); });
  const double ops_ms = BestMs(iters, [&] { ps::optim::StochasticRoundWithOps(values, out, 0, 99u); });
  const double copy_ms = BestMs(iters, [&] { copy_dst.copy_(copy_src); });  // 6 bytes read, 6 written per element
  const double bytes = 6.0 * static_cast<double>(n);
  const double kernel_gbs = bytes / kernel_ms / 1e6, copy_gbs = 2 * bytes / copy_ms / 1e6;
  std::printf("speed on %lld elements: kernel %.3f ms (%.0f GB/s), LibTorch ops %.3f ms (%.1fx the kernel), device "
              "copy %.0f GB/s: kernel at %.2f of copy bandwidth\n",
              static_cast<long long>(n), kernel_ms, kernel_gbs, ops_ms, ops_ms / kernel_ms, copy_gbs,
              kernel_gbs / copy_gbs);
  std::printf("{\"mismatches\": %lld, \"numel\": %lld, \"kernel_ms\": %.4f, \"ops_ms\": %.4f, \"kernel_gbs\": %.1f, "
              "\"copy_gbs\": %.1f, \"ratio_to_copy\": %.3f}\n",
              static_cast<long long>(mismatches), static_cast<long long>(n), kernel_ms, ops_ms, kernel_gbs, copy_gbs,
              kernel_gbs / copy_gbs);
  return mismatches == 0 ? 0 : 1;
}
