// ChunkEngine: the training state of a chunk run. Parameters, gradients, fp32 masters
// and Adam moments live in chunks (ChunkSetup: store, runtime, hybrid Adam, loss
// scaler); the model's blocks bind their parameters through layer hooks. Its checkpoint
// state is by parameter name (fp32 masters; the compute-dtype copies are derived), plus
// the loss scaler and, for the same chunk layout and activation shape, the warm-up
// trace, so a resumed run places and updates every chunk as the saving run did.
// See engine.h for the step order.
#pragma once

#include <cstdint>
#include <string>

#include "trainer/engine/chunk_setup.h"
#include "trainer/engine/engine.h"

namespace ps::trainer {

class ChunkEngine final : public TrainingEngine {
 public:
  // Takes `model` (on the host, uninitialised) into chunks, its initial values written
  // there as `init` says; logs the layout and the optimizer.
  // `comm` (not owned; null = one process): with several ranks the chunks are sharded
  // over them (ZeRO over chunk groups, docs/comm.md); Save is then collective and returns
  // this rank's share (a sharded checkpoint), GatherParams gathers every rank's.
  ChunkEngine(std::unique_ptr<models::TrainableModel> model, const Config& config, at::Device device,
              const models::InitPlan& init, comm::Communicator* comm = nullptr);

  void BeginStep(double lr) override;
  models::LossOutput Forward(const models::Batch& batch, int64_t accum_steps, double loss_divisor) override;
  std::vector<models::LossOutput> ForwardMany(const std::vector<models::Batch>& batches,
                                              const std::vector<double>& loss_divisors) override;
  void Backward(const at::Tensor& loss) override;
  void SyncGradients() override;
  StepOutcome OptimizerStep(double lr, double max_norm) override;
  void EndStep(int64_t step) override;
  void BeginEval() override;
  models::LossOutput EvalLoss(const models::Batch& batch) override;
  void EndEval() override;
  void AddStepMetrics(MetricFields& fields) override;
  void FillResult(TrainResult& result) const override;
  EngineState Save() const override;
  models::TensorMap GatherParams() const override;
  models::TensorMap GatherTrainableParams() const override;
  void Load(const EngineState& state) override;
  at::Device device() const override { return device_; }
  bool collective_save() const override { return comm_ != nullptr; }

 private:
  // What a saved warm-up trace is valid for: the chunk layout and what shapes the
  // activations (a trace from another layout or micro-batch is not reused).
  std::string WarmupKey() const;
  std::string AccumulationKey() const;  // its micro-batches per step and their schedule
  // Before the backward that completes the step's gradients: speculation may start
  // (optimizer.speculation_slots).
  void BeginFinalBackward();

  // ZeRO: every parameter's fp32 value, gathered group by group from the owners' master
  // chunks (a frozen chunk's compute chunk); groups of frozen chunks alone only when
  // `frozen`. Collective.
  models::TensorMap GatherGroups(bool frozen) const;
  // One process: the fp32 masters of the trainable parameters and the host parameters by
  // name (Save's params, without its moments; a chunk on the NVMe tier copied out).
  models::TensorMap OwnedMasters() const;
  // Frozen parameters (LoRA's base): written from `state` where it has them (this rank's
  // chunks), and checked against its frozen_fingerprint (chunk_engine_state.cc).
  void LoadFrozen(const EngineState& state);
  // ValuesFingerprint of the frozen parameters ("" without any), the same on every rank
  // and for every rank count: each rank samples the chunks it owns (collective with comm_).
  std::string FrozenFingerprint() const;

  std::unique_ptr<models::TrainableModel> model_;
  comm::Communicator* comm_ = nullptr;  // data parallel only (world size > 1, or distributed.force_collectives)
  const Config& config_;
  at::Device device_;
  ChunkSetup chunks_;
  optim::StepReport last_report_;
  double step_lr_ = 0.0;      // BeginStep's: speculation updates with it
  int64_t micro_batch_ = 0;   // forwards since BeginStep
  double move_ms_at_step_start_ = 0.0;
  int64_t comm_bytes_at_step_start_ = 0;  // ZeRO: for the step's communication bytes
  int64_t peak_device_chunk_bytes_ = 0;  // over the whole run (the store's peak is reset per log line)
};

}  // namespace ps::trainer
