// FusedAdam: Adam / AdamW over a plain list of parameters (the plain engine's optimizer)
// with LibTorch's multi-tensor fused kernels (at::_fused_adamw_ / _fused_adam_, CPU and
// CUDA): one call per decay group and step instead of an update per parameter, and the
// gradient-norm clip folded into the kernel's grad_scale, so a step reads each gradient
// twice (norm, update) and writes nothing extra. Weight decay on matrices only (biases
// and norm weights, the 1-D parameters, are never decayed). Moments are created at a
// parameter's first update, as torch.optim does. Not thread-safe; the caller's stream.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "optim/optim_config.h"

namespace ps::optim {

struct FusedAdamStepResult {
  double grad_norm = 0.0;  // global L2 norm of the gradients, before clipping
  bool skipped = false;    // the norm (after clipping) not finite or > kMaxUpdateGradNorm: nothing updated
};

class FusedAdam {
 public:
  // `params`: the trainable leaves (their .grad() is read), each once.
  FusedAdam(std::vector<at::Tensor> params, const OptimizerConfig& config);

  // Clips to `max_norm` (infinity = off) and updates every parameter with a gradient.
  FusedAdamStepResult Step(double lr, double max_norm);

  // Per-parameter state for checkpoints (index = position in `params`). Moments are
  // undefined before the first update.
  const at::Tensor& exp_avg(int i) const { return exp_avg_.at(i); }
  const at::Tensor& exp_avg_sq(int i) const { return exp_avg_sq_.at(i); }
  int64_t steps(int i) const { return steps_.at(i); }
  // Restores one parameter's state: `steps` 0 clears it (moments recreated at the next update).
  void SetState(int i, const at::Tensor& exp_avg, const at::Tensor& exp_avg_sq, int64_t steps);

 private:
  void EnsureState(int i);

  std::vector<at::Tensor> params_;
  OptimizerConfig config_;
  std::vector<at::Tensor> exp_avg_, exp_avg_sq_;
  std::vector<at::Tensor> step_tensors_;  // fp32 scalars on the parameter's device: what the kernel reads
  std::vector<int64_t> steps_;
};

}  // namespace ps::optim
