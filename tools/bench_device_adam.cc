// Benchmark (not a test) of the device update (optim/device_adam.h) on a CUDA GPU, for a
// --config=cuda build on the GPU machine: one chunk of `--numel` elements, gradients in
// bf16 on the device (fp32 for the fp32 mode), updated through DeviceAdam::Update in the
// runs' slices, per mode: fp32 state with an fp32 master (LibTorch's fused op), bf16 and
// 8-bit state with the master, 8-bit and bf16 state without it (the fused CUDA kernel,
// and the LibTorch-ops path it replaced as the baseline). Each mode's bytes per element
// (read + written) against a device copy's bandwidth, best of `--iters`. The kernel's
// bitwise check is device_adam_cuda_test (tools/gpu_checks.sh adam_cuda runs both). The
// last line is one JSON object. Without CUDA it says so and exits 2.
#include <ATen/ATen.h>
#include <cxxopts.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>

#include "chunkmem/update_scratch.h"
#include "optim/device_adam.h"
#include "tools/device_timing.h"

namespace {

using ps::optim::DeviceAdam;
using ps::optim::DeviceChunk;
using ps::optim::DeviceParam;

struct Mode {
  const char* name;
  at::ScalarType state;
  bool master;  // an fp32 master (else bf16 weights, stochastically rounded)
  // Bytes per element the update must read and write: weights, gradient, m and v (8-bit
  // state: the codes; the scales add 8 bytes per 256 elements).
  double bytes;
};

// Milliseconds of one update of a chunk of `n` elements in `mode`, by the fused kernel
// where the mode takes it, or (`fused` false) by the LibTorch-ops path.
double UpdateMs(const Mode& mode, int64_t n, int iters, bool fused) {
  const at::TensorOptions cuda = at::TensorOptions().device(at::kCUDA);
  DeviceChunk d;
  d.master = (at::randn({n}, cuda) * 0.02).to(mode.master ? at::kFloat : at::kBFloat16);
  d.grads = at::randn({n}, cuda).to(mode.state == at::kFloat && mode.master ? at::kFloat : at::kBFloat16);
  const int64_t moment_numel = mode.state == at::kByte ? n + 4 * (n / ps::optim::kQuantBlockNumel) : n;
  d.m = at::zeros({moment_numel}, cuda.dtype(mode.state));
  d.v = at::zeros({moment_numel}, cuda.dtype(mode.state));
  d.capacity_numel = n;
  d.used_numel = n;
  DeviceParam p;
  p.slice = ps::optim::SliceParam{0, 0, n, true};
  p.decay = true;
  p.step = at::full({}, 1.0, cuda.dtype(at::kFloat));
  p.step_count = 1;
  ps::optim::OptimizerConfig config;
  DeviceAdam adam(config, ps::chunkmem::kDeviceUpdateSliceNumel);
  adam.UseFusedKernel(fused);
  DeviceAdam::Needs needs;
  needs.grads = d.grads.scalar_type() != at::kFloat;
  needs.moments = mode.state != at::kFloat;
  needs.compute = false;
  needs.master = !mode.master;
  adam.Reserve(n, needs, d.master.device());
  const at::Tensor unscale = at::full({}, 1.0, cuda.dtype(at::kFloat));
  return ps::tools::BestMs(iters, [&] { adam.Update(d, {p}, 1e-3, 1.0, unscale); });
}

}  // namespace

int main(int argc, char** argv) {
  cxxopts::Options options("bench_device_adam", "the device update's speed per state mode");
  options.add_options()("numel", "elements of the chunk (a multiple of 256)",
                        cxxopts::value<int64_t>()->default_value("134217728"))(
      "iters", "timed iterations (best is reported)", cxxopts::value<int>()->default_value("5"))("help", "usage");
  const auto args = options.parse(argc, argv);
  if (args.count("help")) {
    std::printf("%s\n", options.help().c_str());
    return 0;
  }
  if (!at::hasCUDA()) {
    std::fprintf(stderr, "bench_device_adam: no CUDA device (build with --config=cuda, run on a GPU)\n");
    return 2;
  }
  const int64_t n = args["numel"].as<int64_t>() / ps::optim::kQuantBlockNumel * ps::optim::kQuantBlockNumel;
  const int iters = args["iters"].as<int>();
  const at::TensorOptions cuda = at::TensorOptions().device(at::kCUDA).dtype(at::kBFloat16);
  at::Tensor copy_src = at::empty({n * 8}, cuda), copy_dst = at::empty({n * 8}, cuda);
  const double copy_gbs = 2.0 * 16.0 * static_cast<double>(n) / ps::tools::BestMs(iters, [&] { copy_dst.copy_(copy_src); }) / 1e6;
  copy_src = copy_dst = at::Tensor();
  const Mode modes[] = {{"fp32", at::kFloat, true, 28}, {"bf16", at::kBFloat16, true, 18},
                        {"int8", at::kByte, true, 14 + 16.0 / 256}, {"none-int8", at::kByte, false, 10 + 16.0 / 256},
                        {"none-bf16", at::kBFloat16, false, 14}};
  std::string json = "{\"numel\": " + std::to_string(n) + ", \"copy_gbs\": " + std::to_string(copy_gbs);
  std::printf("device update of %lld elements; device copy %.0f GB/s (read + written)\n", static_cast<long long>(n),
              copy_gbs);
  for (const Mode& mode : modes) {
    const double ms = UpdateMs(mode, n, iters, true);
    const double ops_ms = UpdateMs(mode, n, iters, false);  // the same path for fp32
    const double gbs = mode.bytes * static_cast<double>(n) / ms / 1e6;
    std::printf("%-10s %8.3f ms  %5.1f bytes/element  %6.0f GB/s  %.2f of copy bandwidth  (ops path %.3f ms: "
                "%.1fx)\n",
                mode.name, ms, mode.bytes, gbs, gbs / copy_gbs, ops_ms, ops_ms / ms);
    json += std::string(", \"") + mode.name + "\": {\"ms\": " + std::to_string(ms) + ", \"ops_ms\": " +
            std::to_string(ops_ms) + ", \"ratio_to_copy\": " + std::to_string(gbs / copy_gbs) + "}";
  }
  std::printf("%s}\n", json.c_str());
  return 0;
}
