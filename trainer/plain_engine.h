// PlainEngine: the training state of a plain LibTorch run: the model's own parameters
// on the compute device and LibTorch's fused multi-tensor Adam/AdamW (optim/fused_adam.h;
// decay on matrices only), bf16 by autocast. The baseline the chunk engine must match. See engine.h for the step order.
#pragma once


#include <memory>
#include <vector>

#include "optim/fused_adam.h"
#include "trainer/engine.h"

namespace ps::trainer {

class PlainEngine final : public TrainingEngine {
 public:
  // Moves `model` to `device`.
  PlainEngine(models::Gpt model, const Config& config, at::Device device);

  void BeginStep() override;
  at::Tensor Forward(const at::Tensor& x, const at::Tensor& y, int64_t accum_steps) override;
  void Backward(const at::Tensor& loss) override;
  StepOutcome OptimizerStep(double lr, double max_norm) override;
  void BeginEval() override;
  at::Tensor EvalLoss(const at::Tensor& x, const at::Tensor& y) override;
  void EndEval() override;
  EngineState Save() const override;
  void Load(const EngineState& state) override;
  at::Device device() const override { return device_; }

 private:
  models::Gpt model_;
  const Config& config_;
  at::Device device_;
  std::vector<models::BlockParameter> params_;  // each once, in model order
  std::vector<at::Tensor> param_tensors_;
  std::unique_ptr<optim::FusedAdam> optimizer_;
};

}  // namespace ps::trainer
