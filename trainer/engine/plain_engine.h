// PlainEngine: the training state of a plain LibTorch run: the model's own parameters
// on the compute device and LibTorch's fused multi-tensor Adam/AdamW (optim/fused_adam.h;
// decay on matrices only), bf16 by autocast. The baseline the chunk engine must match. See engine.h for the step order.
// Plain data parallel: with a communicator of world size p > 1, every rank holds the
// whole state; the first step broadcasts rank 0's parameters, and SyncGradients
// averages the gradients over ranks in fp32 buckets of about kBucketBytes (one
// all-reduce per bucket, the next bucket packed while the last one travels).
// Frozen parameters (requires_grad false: LoRA's base) get no gradient, no optimizer
// state and no place in Save(); Save() records their ValuesFingerprint instead
// (extra "frozen_fingerprint"), and Load() keeps a frozen parameter the state lacks and
// refuses a state saved over other frozen values. Only the trainable parameters are
// broadcast and averaged over ranks (each rank builds the same frozen ones).
#pragma once


#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "optim/fused_adam.h"
#include "trainer/engine/engine.h"

namespace ps::trainer {

class PlainEngine final : public TrainingEngine {
 public:
  static constexpr int64_t kBucketBytes = 4 << 20;  // fp32 bytes per gradient all-reduce

  // Initialises `model`'s parameters in place as `init` says (on the host, in parallel
  // over parameters), then moves it to `device`. `comm`: null = one process
  // (MakeEngine passes one for world size > 1, or 1 with distributed.force_collectives);
  // else not owned, outlives the engine.
  PlainEngine(std::unique_ptr<models::TrainableModel> model, const Config& config, at::Device device,
              const models::InitPlan& init, comm::Communicator* comm = nullptr);

  void BeginStep(double lr) override;
  models::LossOutput Forward(const models::Batch& batch, int64_t accum_steps, double loss_divisor) override;
  std::vector<models::LossOutput> ForwardMany(const std::vector<models::Batch>& batches,
                                              const std::vector<double>& loss_divisors) override;
  void Backward(const at::Tensor& loss) override;
  void SyncGradients() override;  // all-reduce average over ranks (no-op for one)
  StepOutcome OptimizerStep(double lr, double max_norm) override;
  void BeginEval() override;
  models::LossOutput EvalLoss(const models::Batch& batch) override;
  void EndEval() override;
  EngineState Save() const override;
  models::TensorMap GatherParams() const override;  // frozen ones included
  void Load(const EngineState& state) override;
  at::Device device() const override { return device_; }

 private:
  std::unique_ptr<models::TrainableModel> model_;
  const Config& config_;
  at::Device device_;
  std::string FrozenFingerprint() const;  // empty: nothing frozen

  std::vector<models::BlockParameter> params_;  // each once, in model order
  std::vector<size_t> trainable_;               // indices into params_ of those that train
  std::vector<at::Tensor> param_tensors_;       // the trainable ones' tensors (the optimizer's order)
  std::unique_ptr<optim::FusedAdam> optimizer_;
  comm::Communicator* comm_ = nullptr;
  bool params_broadcast_ = false;  // rank 0's parameters sent to all (first step)
};

}  // namespace ps::trainer
