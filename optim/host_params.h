// HostParams: the parameters HybridAdam keeps outside the chunks (contiguous fp32 host
// tensors, e.g. the CPU embeddings), each with its own Adam m and v and step count.
// Updated by the CPU kernels in every step in which they have a gradient (a parameter
// without one is not updated and its count does not advance, as in LibTorch); weight
// decay on 2-D and larger ones only. Their gradients enter the step's norm; .grad is
// read and cleared by the step. Training thread only.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "optim/cpu_adam.h"
#include "optim/optim_config.h"

namespace ps::optim {

class HostParams {
 public:
  // A parameter's live tensors and its updates so far (checkpoints).
  struct State {
    std::string name;
    at::Tensor param, m, v;
    int64_t steps = 0;
  };

  // `param`: contiguous fp32 on the CPU (else c10::Error naming it); m and v start at 0.
  void Add(const std::string& name, const at::Tensor& param);
  std::vector<State> states() const;
  void set_steps(const std::string& name, int64_t steps);  // c10::Error for an unknown name
  // The gradients present this step, in the order the parameters were added.
  std::vector<at::Tensor> Grads() const;
  // One Adam/AdamW update of every parameter with a gradient (`grad_scale` multiplies
  // the gradients: the loss-scale division and the clip coefficient).
  void Update(const CpuAdamKernels& kernels, int threads, const OptimizerConfig& config, double lr,
              double grad_scale);
  void ClearGrads();

 private:
  struct Param {
    State state;
    bool decay = false;
  };
  std::vector<Param> params_;
};

}  // namespace ps::optim
