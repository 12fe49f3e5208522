#include "optim/host_params.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/zeros_like.h>
#include <c10/util/Exception.h>

namespace ps::optim {

void HostParams::Add(const std::string& name, const at::Tensor& param) {
  TORCH_CHECK(param.is_cpu() && param.scalar_type() == at::kFloat && param.is_contiguous(),
              "HybridAdam: host parameter '", name, "' must be a contiguous fp32 CPU tensor");
  params_.push_back({{name, param, at::zeros_like(param), at::zeros_like(param), 0}, param.dim() >= 2});
}

std::vector<HostParams::State> HostParams::states() const {
  std::vector<State> out;
  for (const auto& p : params_) out.push_back(p.state);
  return out;
}

void HostParams::set_steps(const std::string& name, int64_t steps) {
  for (auto& p : params_) {
    if (p.state.name == name) {
      p.state.steps = steps;
      return;
    }
  }
  TORCH_CHECK(false, "HybridAdam: no host parameter '", name, "'");
}

std::vector<at::Tensor> HostParams::Grads() const {
  std::vector<at::Tensor> grads;
  for (const auto& p : params_) {
    if (p.state.param.grad().defined()) grads.push_back(p.state.param.grad());
  }
  return grads;
}

void HostParams::Update(const CpuAdamKernels& kernels, int threads, const OptimizerConfig& config, double lr,
                        double grad_scale) {
  std::vector<AdamWork> work;
  for (auto& p : params_) {
    State& s = p.state;
    const at::Tensor grad = s.param.grad();
    if (!grad.defined()) continue;  // unused this step: not updated (as LibTorch)
    AdamWork w;
    w.span.master = s.param.data_ptr<float>();
    w.span.m = s.m.data_ptr<float>();
    w.span.v = s.v.data_ptr<float>();
    w.span.grad = grad.data_ptr();
    w.span.grad_type = ElemType::kFp32;
    w.span.numel = s.param.numel();
    w.hyper = AdamHyper::Make(lr, config.betas[0], config.betas[1], config.eps, p.decay ? config.weight_decay : 0.0,
                              config.type == OptimizerType::kAdamW, ++s.steps, grad_scale);
    work.push_back(w);
  }
  ParallelAdam(kernels, work, threads);
}

void HostParams::ClearGrads() {
  for (auto& p : params_) p.state.param.mutable_grad() = at::Tensor();
}

}  // namespace ps::optim
