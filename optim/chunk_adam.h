// ChunkAdam: the interim optimizer of the chunk runtime, Adam/AdamW applied to each
// parameter's views in the fp32 master, grad, m and v chunks, with the exact op order of
// torch::optim::AdamW/Adam (so fp32 training matches plain LibTorch bit for bit), and
// global-norm clipping with the exact arithmetic of torch::nn::utils::clip_grad_norm_.
// It runs where the chunks are (host tier). The hybrid CPU/GPU chunk Adam replaces it.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "chunkmem/runtime.h"
#include "optim/optim_config.h"

namespace ps::optim {

class ChunkAdam {
 public:
  // Weight decay applies to parameters with 2 or more dimensions (not biases/norms).
  ChunkAdam(chunkmem::ChunkRuntime& runtime, const OptimizerConfig& config);

  // L2 norm over every gradient received this step; the next Step scales them so it is
  // <= max_norm (max_norm <= 0: no scaling). Returns the norm before scaling.
  double ClipGradNorm(double max_norm);

  // One update of every parameter that received a gradient; writes the compute-dtype
  // copy when it differs from the fp32 master.
  void Step(double lr);

 private:
  chunkmem::ChunkRuntime& runtime_;
  OptimizerConfig config_;
  std::vector<bool> decay_;     // [param]
  std::vector<int64_t> steps_;  // [param] updates so far (bias correction)
  at::Tensor clip_coef_;        // 0-dim, from ClipGradNorm; undefined = 1
};

}  // namespace ps::optim
