#include "optim/fused_adam.h"

#include <ATen/core/Tensor.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/_foreach_add.h>
#include <ATen/ops/_foreach_norm.h>
#include <ATen/ops/_fused_adam.h>
#include <ATen/ops/_fused_adamw.h>
#include <ATen/ops/full.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/zeros_like.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>

namespace ps::optim {

FusedAdam::FusedAdam(std::vector<at::Tensor> params, const OptimizerConfig& config)
    : params_(std::move(params)),
      config_(config),
      exp_avg_(params_.size()),
      exp_avg_sq_(params_.size()),
      step_tensors_(params_.size()),
      steps_(params_.size(), 0) {
  TORCH_CHECK(config_.betas.size() == 2, "optimizer.betas needs two values");
}

void FusedAdam::EnsureState(int i) {
  if (!exp_avg_[i].defined()) {
    exp_avg_[i] = at::zeros_like(params_[i], at::MemoryFormat::Preserve);
    exp_avg_sq_[i] = at::zeros_like(params_[i], at::MemoryFormat::Preserve);
  }
  if (!step_tensors_[i].defined()) {
    step_tensors_[i] = at::full({}, static_cast<double>(steps_[i]), params_[i].options().dtype(at::kFloat));
  }
}

void FusedAdam::SetState(int i, const at::Tensor& exp_avg, const at::Tensor& exp_avg_sq, int64_t steps) {
  at::NoGradGuard no_grad;
  steps_.at(i) = steps;
  step_tensors_[i] = at::Tensor();
  if (steps == 0) {
    exp_avg_[i] = exp_avg_sq_[i] = at::Tensor();
    return;
  }
  exp_avg_[i] = exp_avg.to(params_[i].options()).clone();
  exp_avg_sq_[i] = exp_avg_sq.to(params_[i].options()).clone();
}

FusedAdamStepResult FusedAdam::Step(double lr, double max_norm) {
  at::NoGradGuard no_grad;
  FusedAdamStepResult out;
  std::vector<int> with_grad;
  std::vector<at::Tensor> grads;
  for (size_t i = 0; i < params_.size(); ++i) {
    const at::Tensor& g = params_[i].grad();
    if (!g.defined()) continue;
    with_grad.push_back(static_cast<int>(i));
    grads.push_back(g);
  }
  if (grads.empty()) return out;
  // Global norm as torch.nn.utils.clip_grad_norm_ computes it (fp32 norms of each
  // gradient, then the norm of those), one host sync for the clip decision.
  const std::vector<at::Tensor> norms = at::_foreach_norm(grads, 2);
  out.grad_norm = at::stack(norms).norm(2).item<double>();
  // The kernel divides gradients by grad_scale: clipping by coef = max_norm / (norm + 1e-6)
  // is grad_scale = 1 / coef, applied only when it shrinks them.
  const double coef = max_norm / (out.grad_norm + 1e-6);
  if (!std::isfinite(out.grad_norm) || out.grad_norm * std::min(coef, 1.0) > kMaxUpdateGradNorm) {
    out.skipped = true;
    return out;
  }
  const at::Device device = params_[with_grad.front()].device();
  std::optional<at::Tensor> grad_scale;
  if (coef < 1.0) grad_scale = at::full({}, 1.0 / coef, at::TensorOptions().dtype(at::kFloat).device(device));

  const auto& c = config_;
  for (const bool decay : {true, false}) {
    std::vector<at::Tensor> p, g, m, v, steps;
    for (size_t k = 0; k < with_grad.size(); ++k) {
      const int i = with_grad[k];
      if ((params_[i].dim() >= 2) != decay) continue;
      EnsureState(i);
      p.push_back(params_[i]);
      g.push_back(grads[k]);
      m.push_back(exp_avg_[i]);
      v.push_back(exp_avg_sq_[i]);
      steps.push_back(step_tensors_[i]);
      ++steps_[i];
    }
    if (p.empty()) continue;
    at::_foreach_add_(steps, 1);  // the kernel reads the step count for bias correction
    const double wd = decay ? c.weight_decay : 0.0;
    if (c.type == OptimizerType::kAdamW) {
      at::_fused_adamw_(p, g, m, v, {}, steps, lr, c.betas[0], c.betas[1], wd, c.eps, /*amsgrad=*/false,
                        /*maximize=*/false, grad_scale, /*found_inf=*/std::nullopt);
    } else {
      at::_fused_adam_(p, g, m, v, {}, steps, lr, c.betas[0], c.betas[1], wd, c.eps, /*amsgrad=*/false,
                       /*maximize=*/false, grad_scale, /*found_inf=*/std::nullopt);
    }
  }
  return out;
}

}  // namespace ps::optim
