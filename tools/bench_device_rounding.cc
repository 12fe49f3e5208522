// Benchmark (not a test) of the device update's stochastic rounding on a CUDA GPU
// (optim/device_rounding.h), for a --config=cuda build on the GPU machine: the CUDA kernel
// and the LibTorch-ops form on `--numel` elements against a device copy of the kernel's
// bytes (fp32 in, bf16 out: 6 bytes per element), best of `--iters`. The kernel's
// bitwise check is device_rounding_test's CUDA case (tools/gpu_checks.sh sr_cuda runs
// both). The last line is one JSON object. Without CUDA it says so and exits 2.
#include <ATen/ATen.h>
#include <cxxopts.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>

#include "optim/device_rounding.h"
#include "tools/device_timing.h"

int main(int argc, char** argv) {
  cxxopts::Options options("bench_device_rounding", "the CUDA stochastic-rounding kernel's speed");
  options.add_options()("numel", "elements of the timed runs", cxxopts::value<int64_t>()->default_value("268435456"))(
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
  const int64_t n = args["numel"].as<int64_t>();
  const int iters = args["iters"].as<int>();
  const at::Tensor values = at::randn({n}, at::TensorOptions().device(at::kCUDA));
  at::Tensor out = at::empty({n}, values.options().dtype(at::kBFloat16));
  at::Tensor copy_src = at::empty({n * 3}, out.options());  // the kernel's 6 bytes per element, read and written
  at::Tensor copy_dst = at::empty({n * 3}, out.options());
  const double kernel_ms = ps::tools::BestMs(iters, [&] { ps::optim::StochasticRoundInto(values, out, 0, 99u); });
  const double ops_ms = ps::tools::BestMs(iters, [&] { ps::optim::StochasticRoundWithOps(values, out, 0, 99u); });
  const double copy_ms = ps::tools::BestMs(iters, [&] { copy_dst.copy_(copy_src); });  // 6 bytes read, 6 written per element
  const double bytes = 6.0 * static_cast<double>(n);
  const double kernel_gbs = bytes / kernel_ms / 1e6, copy_gbs = 2 * bytes / copy_ms / 1e6;
  std::printf("speed on %lld elements: kernel %.3f ms (%.0f GB/s), LibTorch ops %.3f ms (%.1fx the kernel), device "
              "copy %.0f GB/s: kernel at %.2f of copy bandwidth\n",
              static_cast<long long>(n), kernel_ms, kernel_gbs, ops_ms, ops_ms / kernel_ms, copy_gbs,
              kernel_gbs / copy_gbs);
  std::printf("{\"numel\": %lld, \"kernel_ms\": %.4f, \"ops_ms\": %.4f, \"kernel_gbs\": %.1f, "
              "\"copy_gbs\": %.1f, \"ratio_to_copy\": %.3f}\n",
              static_cast<long long>(n), kernel_ms, ops_ms, kernel_gbs, copy_gbs,
              kernel_gbs / copy_gbs);
  return 0;
}
