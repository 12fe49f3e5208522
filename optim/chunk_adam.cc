#include "optim/chunk_adam.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <cmath>
#include <limits>

namespace ps::optim {

using chunkmem::ChunkKind;

ChunkAdam::ChunkAdam(chunkmem::ChunkRuntime& runtime, const OptimizerConfig& config)
    : runtime_(runtime), config_(config) {
  for (int i = 0; i < static_cast<int>(runtime.params().size()); ++i) {
    decay_.push_back(runtime.View(ChunkKind::kMaster, i).dim() >= 2);
  }
  steps_.assign(decay_.size(), 0);
}

namespace {

// Parameter i's gradient as fp32 on `device` (the grad chunks are fp32 already; reused
// compute slots hold the compute dtype).
at::Tensor GradFp32(const chunkmem::ChunkRuntime& runtime, int i, at::Device device) {
  return runtime.View(ChunkKind::kGrad, i).to(device, at::kFloat);
}

}  // namespace

double ChunkAdam::ClipGradNorm(double max_norm) {
  at::NoGradGuard no_grad;
  clip_coef_ = at::Tensor();
  std::vector<at::Tensor> norms;
  for (int i = 0; i < static_cast<int>(decay_.size()); ++i) {
    if (!runtime_.has_grad(i)) continue;
    norms.push_back(GradFp32(runtime_, i, at::kCPU).norm(2));
  }
  if (norms.empty()) return 0.0;
  const at::Tensor total = norms.size() == 1 ? norms[0] : at::stack(norms).norm(2);
  const double bound = max_norm > 0 ? max_norm : std::numeric_limits<double>::infinity();
  clip_coef_ = at::clamp(bound / (total + 1e-6), std::nullopt, 1.0);
  return total.item<double>();
}

void ChunkAdam::Step(double lr) {
  at::NoGradGuard no_grad;
  const double beta1 = config_.betas[0], beta2 = config_.betas[1];
  const bool separate_master = runtime_.compute_dtype() != at::kFloat;
  for (int i = 0; i < static_cast<int>(decay_.size()); ++i) {
    if (!runtime_.has_grad(i)) continue;  // as LibTorch: no gradient, no update
    at::Tensor master = runtime_.View(ChunkKind::kMaster, i);
    at::Tensor m = runtime_.View(ChunkKind::kAdamM, i);
    at::Tensor v = runtime_.View(ChunkKind::kAdamV, i);
    at::Tensor grad = GradFp32(runtime_, i, m.device());
    if (clip_coef_.defined()) grad = grad.mul(clip_coef_);  // as clip_grad_norm_'s in-place mul_
    // fp32 mode: the master is the compute chunk, which may sit on the device tier.
    at::Tensor p = master.device() == m.device() ? master : master.to(m.device());
    const double wd = decay_[i] ? config_.weight_decay : 0.0;
    if (config_.type == OptimizerType::kAdamW) {
      if (wd != 0) p.mul_(1 - lr * wd);
    } else if (wd != 0) {
      grad = grad.add(p, wd);  // Adam: L2 term in the gradient
    }
    const int64_t step = ++steps_[i];
    const double bias_correction1 = 1 - std::pow(beta1, step);
    const double bias_correction2 = 1 - std::pow(beta2, step);
    m.mul_(beta1).add_(grad, 1 - beta1);
    v.mul_(beta2).addcmul_(grad, grad, 1 - beta2);
    const at::Tensor denom = (v.sqrt() / std::sqrt(bias_correction2)).add_(config_.eps);
    p.addcdiv_(m, denom, -lr / bias_correction1);
    if (!p.is_same(master)) master.copy_(p);
    if (separate_master) runtime_.View(ChunkKind::kCompute, i).copy_(master);
  }
}

}  // namespace ps::optim
