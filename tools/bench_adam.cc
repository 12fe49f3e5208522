// Benchmark (not a test): our CPU Adam against LibTorch's best CPU AdamW and against a
// memory-copy probe of the same bytes, in one process, on one fp32 master of N
// parameters with fp16 gradients and an fp16 parameter copy written back.
//
// Per parameter the Adam pass reads master, m, v (4 B each) and the gradient (2 B) and
// writes master, m, v and the fp16 parameter: 28 bytes of traffic. The copy probe moves
// the same 28 bytes per parameter (memcpy of 14 B/param, multi-threaded). LibTorch does
// the same job with at::_fused_adamw_ (its fused CPU kernel) plus the two dtype
// conversions it needs (fp16 grad -> fp32, fp32 master -> fp16 param); its fused kernel
// alone is reported too, and so is torch::optim::AdamW, the C++ optimizer class. Every
// contender uses the same thread count. The last line is one JSON object.
//
// --state-dtype bf16 | int8 runs our kernel with m and v in bf16 (20 bytes of traffic per
// parameter) or block-wise 8-bit (16, plus the block scales), against a copy probe of
// those bytes; LibTorch's figures stay those of its fp32-moment job. It also reports the
// update error of those moments (UpdateError below).
//
// --master-weights none runs our kernel without an fp32 master (optimizer.master_weights
// none): bf16 weights and gradients, the weights read and written back stochastically
// rounded (per parameter 4 + 2 x state bytes read, 2 + 2 x state written, against a copy
// probe of those bytes), and reports that mode's update error (UpdateErrorNoMaster).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/optim/adamw.h>
#include <cxxopts.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "optim/block_quant.h"
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

// m and v of n parameters stored as `dtype` (fp32, bf16, int8 with its block scales),
// all zero.
struct Moments {
  at::Tensor m, v, m_scale, v_scale;
  ps::optim::ElemType type = ps::optim::ElemType::kFp32;
  Moments(const std::string& dtype, int64_t n) {
    const at::ScalarType t = dtype == "bf16" ? at::kBFloat16 : dtype == "int8" ? at::kByte : at::kFloat;
    type = dtype == "bf16" ? ps::optim::ElemType::kBf16 : dtype == "int8" ? ps::optim::ElemType::kInt8 : type;
    m = at::zeros({n}, t);
    v = at::zeros({n}, t);
    const int64_t blocks = (n + ps::optim::kQuantBlockNumel - 1) / ps::optim::kQuantBlockNumel;
    m_scale = at::zeros({blocks});  // zero scales: zero moments whatever the codes
    v_scale = at::zeros({blocks});
  }
  void Into(ps::optim::AdamSpan& span) {
    span.m = m.data_ptr();
    span.v = v.data_ptr();
    span.state_type = type;
    span.m_scale = m_scale.data_ptr<float>();
    span.v_scale = v_scale.data_ptr<float>();
  }
};

// || a - ref || / || ref ||.
double RelativeError(const at::Tensor& a, const at::Tensor& ref) { return ((a - ref).norm() / ref.norm()).item<double>(); }

// The per-step update error of smaller moments against fp32 ones: two trajectories of
// the same parameters fed the same gradients (a fixed per-element mean plus noise, the
// regime where Adam's moments matter), one storing m and v in fp32, the other as
// `dtype`. Printed per step: || u_small - u_fp32 || / || u_fp32 ||, the updates u =
// p_after - p_before of each trajectory's own step from the same master (the small one
// is reset to the fp32 master first, so only the moments differ).
void UpdateError(const ps::optim::CpuAdamKernels& kernels, const std::string& dtype, int64_t n, int steps,
                 int threads) {
  at::manual_seed(1);
  const at::Tensor mean = at::randn({n}) * 1e-3;
  at::Tensor master = at::randn({n}) * 0.02, m = at::zeros({n}), v = at::zeros({n});
  Moments small(dtype, n);
  double worst = 0.0, sum = 0.0;
  for (int t = 1; t <= steps; ++t) {
    const at::Tensor grad = mean + at::randn({n}) * 1e-3;
    const at::Tensor before = master.clone(), master16 = master.clone();
    const auto hyper = ps::optim::AdamHyper::Make(1e-4, 0.9, 0.95, 1e-8, 0.1, true, t, 1.0);
    ps::optim::AdamSpan wide{master.data_ptr<float>(), m.data_ptr(), v.data_ptr(), ps::optim::ElemType::kFp32,
                             grad.data_ptr(), ps::optim::ElemType::kFp32, nullptr, ps::optim::ElemType::kFp32, n};
    ps::optim::AdamSpan narrow = wide;
    narrow.master = master16.data_ptr<float>();
    small.Into(narrow);
    ps::optim::ParallelAdam(kernels, {{wide, hyper}, {narrow, hyper}}, threads);
    const at::Tensor u = master - before, u16 = master16 - before;
    const double err = RelativeError(u16, u);
    worst = std::max(worst, err);
    sum += err;
    if (t == 1 || t == 10 || t == 100 || t == steps) std::printf("update error at step %d: %.3g\n", t, err);
  }
  std::printf("update error over %d steps: mean %.3g, worst %.3g (relative L2 of the update)\n", steps, sum / steps,
              worst);
}

// master_weights none against the fp32 master: per step, an fp32-master trajectory is
// put at the bf16 weights' values and both take a step on the same gradient (the fp32
// one with fp32 moments, the bf16 one with `dtype` moments and stochastic rounding).
// Printed: the step's relative L2 error of the update, and of the sum of the updates so
// far (stochastic rounding is unbiased: that one shrinks as steps add up); beside them the
// same for the fp32 step rounded to nearest from the same weights instead, which loses
// every update below half a bf16 ulp (a biased error that does not average out).
void UpdateErrorNoMaster(const ps::optim::CpuAdamKernels& kernels, const std::string& dtype, int64_t n, int steps,
                         int threads) {
  at::manual_seed(1);
  const at::Tensor mean = at::randn({n}) * 1e-3;
  at::Tensor weights = (at::randn({n}) * 0.02).to(at::kBFloat16), master = at::empty({n}), m = at::zeros({n});
  at::Tensor v = at::zeros({n}), sum_ref = at::zeros({n}), sum_sr = at::zeros({n}), sum_rne = at::zeros({n});
  Moments small(dtype, n);
  double worst = 0.0, sum = 0.0;
  for (int t = 1; t <= steps; ++t) {
    const at::Tensor grad = mean + at::randn({n}) * 1e-3, grad16 = grad.to(at::kBFloat16);
    master.copy_(weights);
    const at::Tensor before = master.clone();
    const auto hyper = ps::optim::AdamHyper::Make(1e-4, 0.9, 0.95, 1e-8, 0.1, true, t, 1.0);
    ps::optim::AdamSpan wide{master.data_ptr<float>(), m.data_ptr(), v.data_ptr(), ps::optim::ElemType::kFp32,
                             grad16.data_ptr(), ps::optim::ElemType::kBf16, nullptr, ps::optim::ElemType::kFp32, n};
    ps::optim::AdamSpan none = wide;
    none.master = nullptr;
    none.param_out = weights.data_ptr();
    none.out_type = ps::optim::ElemType::kBf16;
    none.sr_seed = static_cast<uint32_t>(t);
    small.Into(none);
    ps::optim::ParallelAdam(kernels, {{wide, hyper}, {none, hyper}}, threads);
    const at::Tensor u = master - before, u_sr = weights.to(at::kFloat) - before;
    const at::Tensor u_rne = master.to(at::kBFloat16).to(at::kFloat) - before;
    sum_ref += u;
    sum_sr += u_sr;
    sum_rne += u_rne;
    const double err = RelativeError(u_sr, u);
    worst = std::max(worst, err);
    sum += err;
    if (t == 1 || t == 10 || t == 100 || t == steps) {
      std::printf("no master: update error at step %d: %.3g; of the summed updates: %.3g (rounded to nearest "
                  "instead: %.3g; summed %.3g)\n", t, err, RelativeError(sum_sr, sum_ref), RelativeError(u_rne, u),
                  RelativeError(sum_rne, sum_ref));
    }
  }
  std::printf("no master: update error over %d steps: mean %.3g, worst %.3g (relative L2 of the update)\n", steps,
              sum / steps, worst);
}

struct Settings {
  int64_t n = 0;
  int threads = 1, iters = 5, error_steps = 0;
  ps::optim::CpuIsa isa = ps::optim::CpuIsa::kScalar;
  std::string state_dtype = "fp32";
  bool master = true;  // --master-weights fp32 (else none)
  int64_t state_bytes() const { return state_dtype == "bf16" ? 2 : state_dtype == "int8" ? 1 : 4; }
};

// Our kernel's best time for one step over n parameters (fp16 gradients and output).
double TimeOurs(const Settings& s, const ps::optim::CpuAdamKernels& kernels, const at::Tensor& grad16,
                at::Tensor& param16) {
  at::Tensor master = at::randn({s.n});
  Moments moments(s.state_dtype, s.n);
  ps::optim::AdamSpan span;
  span.master = master.data_ptr<float>();
  moments.Into(span);
  span.grad = grad16.data_ptr();
  span.grad_type = ps::optim::ElemType::kFp16;
  span.param_out = param16.data_ptr();
  span.out_type = ps::optim::ElemType::kFp16;
  span.numel = s.n;
  const at::Tensor grad_bf16 = s.master ? at::Tensor() : (at::randn({s.n}) * 1e-2).to(at::kBFloat16);
  if (!s.master) {  // bf16 weights and gradients of their own (no loss scale), as in such a run
    span.master = nullptr;
    span.grad = grad_bf16.data_ptr();
    span.grad_type = ps::optim::ElemType::kBf16;
    span.out_type = ps::optim::ElemType::kBf16;
    param16.copy_(master.to(at::kBFloat16).view(at::kHalf));
  }
  const double grad_scale = s.master ? 1.0 / 1024 : 1.0;
  int64_t step = 0;
  return BestSeconds(s.iters, [&] {
    const auto hyper = ps::optim::AdamHyper::Make(1e-4, 0.9, 0.95, 1e-8, 0.1, true, ++step, grad_scale);
    ps::optim::ParallelAdam(kernels, {{span, hyper}}, s.threads);
  });
}

struct TorchSeconds {
  double job = 0, fused_only = 0, optim_class = 0;
};

// LibTorch's fp32-moment job: fused AdamW plus the conversions it needs; the fused op
// alone; torch::optim::AdamW (per-tensor ops), what a LibTorch C++ user gets.
TorchSeconds TimeLibTorch(const Settings& s, const at::Tensor& grad16, at::Tensor& param16) {
  TorchSeconds out;
  at::Tensor tmaster = at::randn({s.n}), tm = at::zeros({s.n}), tv = at::zeros({s.n});
  at::Tensor tgrad32 = at::empty({s.n});
  at::Tensor state_step = at::zeros({}, at::kFloat);
  auto fused = [&] {
    state_step.add_(1);
    at::_fused_adamw_({tmaster}, {tgrad32}, {tm}, {tv}, {}, {state_step}, 1e-4, 0.9, 0.95, 0.1, 1e-8,
                      /*amsgrad=*/false, /*maximize=*/false, std::nullopt, std::nullopt);
  };
  out.job = BestSeconds(s.iters, [&] {
    tgrad32.copy_(grad16).mul_(1.0 / 1024);
    fused();
    param16.copy_(tmaster);
  });
  tgrad32.copy_(grad16).mul_(1.0 / 1024);
  out.fused_only = BestSeconds(s.iters, fused);
  at::Tensor tparam = at::randn({s.n}).requires_grad_(true);
  torch::optim::AdamW adamw_class({tparam}, torch::optim::AdamWOptions(1e-4).betas({0.9, 0.95}).eps(1e-8).weight_decay(0.1));
  at::Tensor& class_grad = tparam.mutable_grad();
  class_grad = at::empty({s.n});
  out.optim_class = BestSeconds(s.iters, [&] {
    class_grad.copy_(grad16).mul_(1.0 / 1024);
    adamw_class.step();
    param16.copy_(tparam.detach());
  });
  return out;
}

void Report(const Settings& s, double ps_s, const TorchSeconds& t, double copy_s, int64_t copy_bytes) {
  const double n = static_cast<double>(s.n);
  const double traffic_bytes = 2.0 * static_cast<double>(copy_bytes);
  const double ps_pps = n / ps_s, torch_pps = n / t.job, torch_fused_pps = n / t.fused_only;
  const double ps_gbs = traffic_bytes / ps_s / 1e9, copy_gbs = traffic_bytes / copy_s / 1e9;
  const char* isa = ps::optim::ToString(s.isa);
  std::printf("params %lld, threads %d, our variant %s, m and v %s, master %s\n", static_cast<long long>(s.n),
              s.threads, isa, s.state_dtype.c_str(), s.master ? "fp32" : "none");
  std::printf("ours          %8.3f s  %10.3g params/s  %6.2f GB/s\n", ps_s, ps_pps, ps_gbs);
  std::printf("libtorch      %8.3f s  %10.3g params/s  (fused AdamW + grad/param conversions)\n", t.job, torch_pps);
  std::printf("libtorch core %8.3f s  %10.3g params/s  (fused AdamW alone, fp32 grads given)\n", t.fused_only,
              torch_fused_pps);
  std::printf("torch::optim::AdamW %8.3f s  %10.3g params/s  (C++ optimizer class + conversions)\n", t.optim_class,
              n / t.optim_class);
  std::printf("memcpy        %8.3f s  %6.2f GB/s (same %lld B/param)\n", copy_s, copy_gbs,
              static_cast<long long>(2 * copy_bytes / s.n));
  std::printf(
      "{\"numel\": %lld, \"threads\": %d, \"isa\": \"%s\", \"state_dtype\": \"%s\", \"master_weights\": \"%s\", \"ps_params_per_s\": %.6g, "
      "\"torch_params_per_s\": %.6g, \"torch_fused_only_params_per_s\": %.6g, \"torch_optim_adamw_params_per_s\": "
      "%.6g, \"copy_gb_per_s\": %.4g, \"ps_gb_per_s\": %.4g, \"ps_vs_torch\": %.3f, \"ps_vs_torch_fused_only\": %.3f, "
      "\"ps_vs_torch_optim_adamw\": %.3f, \"ps_vs_copy\": %.3f}\n",
      static_cast<long long>(s.n), s.threads, isa, s.state_dtype.c_str(), s.master ? "fp32" : "none", ps_pps, torch_pps, torch_fused_pps,
      n / t.optim_class, copy_gbs, ps_gbs, ps_pps / torch_pps, ps_pps / torch_fused_pps, ps_pps * t.optim_class / n,
      ps_gbs / copy_gbs);
}

// Returns false (after printing why) on bad arguments; exits 0 for --help.
bool Parse(int argc, char** argv, Settings& s) {
  cxxopts::Options options("bench_adam", "CPU Adam vs LibTorch fused AdamW vs memcpy, same bytes");
  options.add_options()("numel", "parameters", cxxopts::value<int64_t>()->default_value("100000000"))(
      "threads", "threads for every contender (0 = all cores)", cxxopts::value<int>()->default_value("0"))(
      "iters", "timed iterations (best is reported)", cxxopts::value<int>()->default_value("5"))(
      "isa", "auto|scalar|avx2|avx512", cxxopts::value<std::string>()->default_value("auto"))(
      "state-dtype", "fp32|bf16|int8: how our kernel stores m and v",
      cxxopts::value<std::string>()->default_value("fp32"))(
      "master-weights", "fp32|none: our kernel with an fp32 master, or bf16 weights stochastically rounded",
      cxxopts::value<std::string>()->default_value("fp32"))(
      "error-steps", "bf16 or int8 state, or no master: steps of the update-error trajectories (0 = none)",
      cxxopts::value<int>()->default_value("1000"))("h,help", "help");
  const auto args = options.parse(argc, argv);
  if (args.count("help")) {
    std::printf("%s\n", options.help().c_str());
    std::exit(0);
  }
  s.n = args["numel"].as<int64_t>();
  s.threads = args["threads"].as<int>();
  if (s.threads <= 0) s.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  s.iters = args["iters"].as<int>();
  s.isa = ps::optim::ParseCpuIsa(args["isa"].as<std::string>().c_str());
  s.state_dtype = args["state-dtype"].as<std::string>();
  s.error_steps = args["error-steps"].as<int>();
  const std::string master = args["master-weights"].as<std::string>();
  if (master != "fp32" && master != "none") {
    std::fprintf(stderr, "--master-weights: expected fp32 or none, got '%s'\n", master.c_str());
    return false;
  }
  s.master = master == "fp32";
  if (s.state_dtype != "fp32" && s.state_dtype != "bf16" && s.state_dtype != "int8") {
    std::fprintf(stderr, "--state-dtype: expected fp32, bf16 or int8, got '%s'\n", s.state_dtype.c_str());
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Settings s;
  if (!Parse(argc, argv, s)) return 2;
  at::set_num_threads(s.threads);
  at::manual_seed(0);
  const at::Tensor grad16 = (at::randn({s.n}) * 1e-2).to(at::kHalf);
  at::Tensor param16 = at::empty({s.n}, at::kHalf);
  const auto kernels = ps::optim::KernelsFor(s.isa);
  const double ps_s = TimeOurs(s, kernels, grad16, param16);
  const TorchSeconds torch_s = TimeLibTorch(s, grad16, param16);
  // Copy probe: the bytes our pass reads (master 4, m and v, gradient 2), read and written.
  const int64_t scale_bytes = s.state_dtype == "int8" ? 8 * (s.n / ps::optim::kQuantBlockNumel) : 0;
  // (no master: 4 + 2 x state read, 2 + 2 x state written; the probe copies their mean)
  const int64_t copy_bytes = ((s.master ? 6 : 3) + 2 * s.state_bytes()) * s.n + scale_bytes;
  std::vector<char> src(copy_bytes, 1), dst(copy_bytes, 0);
  const double copy_s = BestSeconds(s.iters, [&] { ParallelCopy(dst.data(), src.data(), copy_bytes, s.threads); });
  if (!s.master && s.error_steps > 0) {
    UpdateErrorNoMaster(kernels, s.state_dtype, std::min<int64_t>(s.n, 1000000), s.error_steps, s.threads);
  } else if (s.state_dtype != "fp32" && s.error_steps > 0) {
    UpdateError(kernels, s.state_dtype, std::min<int64_t>(s.n, 1000000), s.error_steps, s.threads);
  }
  Report(s, ps_s, torch_s, copy_s, copy_bytes);
  return 0;
}
