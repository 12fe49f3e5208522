// Benchmark (not a test): our CPU Adam against LibTorch's best CPU AdamW and against a
// memory-copy probe of the same bytes, in one process, on one fp32 master of N
// parameters with fp16 gradients and an fp16 parameter copy written back.
//
// Per parameter the Adam pass reads master, m, v (4 B each) and the gradient (2 B) and
// writes master, m, v and the fp16 parameter: 28 bytes of traffic. The copy probe moves
// the same 28 bytes per parameter (memcpy of 14 B/param, multi-threaded). LibTorch does
// the same job with at::_fused_adamw_ (its fused CPU kernel) plus the two dtype
// conversions it needs (fp16 grad -> fp32, fp32 master -> fp16 param); its fused kernel
// alone is reported too, and so is torch::optim::AdamW, the C++ optimizer class. Every contender uses the same thread count. The last line is
// one JSON object.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/optim/adamw.h>
#include <cxxopts.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "optim/cpu_adam.h"

namespace {

using Clock = std::chrono::steady_clock;

template <typename F>
double BestSeconds(int iters, F&& f) {
  f();  // warm-up: first touch, thread start
  double best = 1e30;
  for (int i = 0; i < iters; ++i) {
    const auto t0 = Clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return best;
}

void ParallelCopy(char* dst, const char* src, int64_t bytes, int threads) {
  std::vector<std::thread> pool;
  const int64_t per = (bytes / threads + 4095) / 4096 * 4096;
  for (int t = 0; t < threads; ++t) {
    const int64_t lo = std::min(bytes, t * per), hi = t + 1 == threads ? bytes : std::min(bytes, (t + 1) * per);
    pool.emplace_back([=] { std::memcpy(dst + lo, src + lo, hi - lo); });
  }
  for (auto& th : pool) th.join();
}

}  // namespace

int main(int argc, char** argv) {
  cxxopts::Options options("bench_adam", "CPU Adam vs LibTorch fused AdamW vs memcpy, same bytes");
  options.add_options()("numel", "parameters", cxxopts::value<int64_t>()->default_value("100000000"))(
      "threads", "threads for every contender (0 = all cores)", cxxopts::value<int>()->default_value("0"))(
      "iters", "timed iterations (best is reported)", cxxopts::value<int>()->default_value("5"))(
      "isa", "auto|scalar|avx2|avx512", cxxopts::value<std::string>()->default_value("auto"))("h,help", "help");
  const auto args = options.parse(argc, argv);
  if (args.count("help")) {
    std::printf("%s\n", options.help().c_str());
    return 0;
  }
  const int64_t n = args["numel"].as<int64_t>();
  int threads = args["threads"].as<int>();
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int iters = args["iters"].as<int>();
  const ps::optim::CpuIsa isa = ps::optim::ParseCpuIsa(args["isa"].as<std::string>().c_str());
  at::set_num_threads(threads);

  at::manual_seed(0);
  at::Tensor master = at::randn({n});
  at::Tensor m = at::zeros({n}), v = at::zeros({n});
  at::Tensor grad16 = (at::randn({n}) * 1e-2).to(at::kHalf);
  at::Tensor param16 = at::empty({n}, at::kHalf);

  // Ours.
  const auto kernels = ps::optim::KernelsFor(isa);
  ps::optim::AdamSpan span;
  span.master = master.data_ptr<float>();
  span.m = m.data_ptr<float>();
  span.v = v.data_ptr<float>();
  span.grad = grad16.data_ptr();
  span.grad_type = ps::optim::ElemType::kFp16;
  span.param_out = param16.data_ptr();
  span.out_type = ps::optim::ElemType::kFp16;
  span.numel = n;
  int64_t step = 0;
  const double ps_s = BestSeconds(iters, [&] {
    const auto hyper = ps::optim::AdamHyper::Make(1e-4, 0.9, 0.95, 1e-8, 0.1, true, ++step, 1.0 / 1024);
    ps::optim::ParallelAdam(kernels, {{span, hyper}}, threads);
  });

  // LibTorch: fused AdamW on fp32, plus the conversions the same job needs.
  at::Tensor tmaster = at::randn({n}), tm = at::zeros({n}), tv = at::zeros({n});
  at::Tensor tgrad32 = at::empty({n});
  at::Tensor state_step = at::zeros({}, at::kFloat);
  auto fused = [&] {
    state_step.add_(1);
    at::_fused_adamw_({tmaster}, {tgrad32}, {tm}, {tv}, {}, {state_step}, 1e-4, 0.9, 0.95, 0.1, 1e-8,
                      /*amsgrad=*/false, /*maximize=*/false, std::nullopt, std::nullopt);
  };
  const double torch_s = BestSeconds(iters, [&] {
    tgrad32.copy_(grad16).mul_(1.0 / 1024);
    fused();
    param16.copy_(tmaster);
  });
  tgrad32.copy_(grad16).mul_(1.0 / 1024);
  const double torch_fused_s = BestSeconds(iters, fused);

  // What a LibTorch C++ user gets from torch::optim::AdamW (per-tensor ops), same job.
  at::Tensor tparam = at::randn({n}).requires_grad_(true);
  torch::optim::AdamW adamw_class({tparam}, torch::optim::AdamWOptions(1e-4).betas({0.9, 0.95}).eps(1e-8).weight_decay(0.1));
  at::Tensor& class_grad = tparam.mutable_grad();
  class_grad = at::empty({n});
  const double torch_class_s = BestSeconds(iters, [&] {
    class_grad.copy_(grad16).mul_(1.0 / 1024);
    adamw_class.step();
    param16.copy_(tparam.detach());
  });

  // Copy probe: 14 B/param read and written.
  const int64_t copy_bytes = 14 * n;
  std::vector<char> src(copy_bytes, 1), dst(copy_bytes, 0);
  const double copy_s = BestSeconds(iters, [&] { ParallelCopy(dst.data(), src.data(), copy_bytes, threads); });

  const double traffic_bytes = 28.0 * static_cast<double>(n);
  const double ps_pps = n / ps_s, torch_pps = n / torch_s, torch_fused_pps = n / torch_fused_s;
  const double ps_gbs = traffic_bytes / ps_s / 1e9, copy_gbs = traffic_bytes / copy_s / 1e9;
  std::printf("params %lld, threads %d, our variant %s\n", static_cast<long long>(n), threads, ps::optim::ToString(isa));
  std::printf("ours          %8.3f s  %10.3g params/s  %6.2f GB/s\n", ps_s, ps_pps, ps_gbs);
  std::printf("libtorch      %8.3f s  %10.3g params/s  (fused AdamW + grad/param conversions)\n", torch_s, torch_pps);
  std::printf("libtorch core %8.3f s  %10.3g params/s  (fused AdamW alone, fp32 grads given)\n", torch_fused_s,
              torch_fused_pps);
  std::printf("torch::optim::AdamW %8.3f s  %10.3g params/s  (C++ optimizer class + conversions)\n", torch_class_s,
              n / torch_class_s);
  std::printf("memcpy        %8.3f s  %6.2f GB/s (same 28 B/param)\n", copy_s, copy_gbs);
  std::printf(
      "{\"numel\": %lld, \"threads\": %d, \"isa\": \"%s\", \"ps_params_per_s\": %.6g, \"torch_params_per_s\": %.6g, "
      "\"torch_fused_only_params_per_s\": %.6g, \"torch_optim_adamw_params_per_s\": %.6g, \"copy_gb_per_s\": %.4g, \"ps_gb_per_s\": %.4g, "
      "\"ps_vs_torch\": %.3f, \"ps_vs_torch_fused_only\": %.3f, \"ps_vs_torch_optim_adamw\": %.3f, \"ps_vs_copy\": %.3f}\n",
      static_cast<long long>(n), threads, ps::optim::ToString(isa), ps_pps, torch_pps, torch_fused_pps,
      n / torch_class_s, copy_gbs, ps_gbs, ps_pps / torch_pps, ps_pps / torch_fused_pps, ps_pps * torch_class_s / n,
      ps_gbs / copy_gbs);
  return 0;
}
