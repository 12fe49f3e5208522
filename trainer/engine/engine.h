// TrainingEngine: the one owner of a run's training state (model parameters, optimizer
// state, loss scaler, and for chunk runs the chunk placement), behind the step
// interface the training loop drives. Implementations: PlainEngine (LibTorch AdamW over
// the model's own parameters, plain_engine.h) and ChunkEngine (parameters, gradients and
// Adam state in chunks, the hybrid Adam; chunk_engine.h). A multi-rank ZeRO engine is
// the third: SyncGradients is its reduce-scatter point, and Save/Load exchange the
// parameters a rank owns by name, so any rank count resumes any checkpoint.
//
// One optimizer step, as the Trainer (trainer.h) calls it:
//   BeginStep(lr)  ->  ForwardBackward(k micro-batches)  ->  SyncGradients()
//                  ->  OptimizerStep(lr, max_norm)  ->  EndStep(step)
// ForwardBackward runs the engine's accumulation schedule (set_accumulation): horizontal,
//   { out = Forward(batch, k, divisor); Backward(out.loss) } x k micro-batches,
// or vertical (train.accumulation_schedule: vertical, k > 1), one forward and one backward:
//   outs = ForwardMany(batches, divisors); Backward(sum of outs' losses).
// Evaluation: EvalLoss(batch) between steps, under BeginEval()/EndEval().
// Checkpoints: Save() between steps (after EndStep), Load() before the first step.
// Training thread only.
#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "models/param_init.h"
#include "models/safetensors.h"
#include "models/trainable.h"
#include "trainer/config/config.h"
#include "trainer/engine/metric_fields.h"

namespace ps::trainer {

struct TrainResult;

// What one step's forward and backward passes give back: each micro-batch's loss
// (detached, divided by its loss divisor) and accuracy counts, and the milliseconds spent
// in the forward and the backward passes.
struct ForwardBackwardResult {
  std::vector<models::LossOutput> outs;
  double forward_ms = 0, backward_ms = 0;
};

struct StepOutcome {
  double grad_norm = 0.0;       // before clipping, loss scale removed
  bool skipped = false;         // gradient overflow: nothing was updated
  bool overflow_tolerated = false;  // skipped by the fp16 loss scaler (not a divergence)
  double loss_scale = 1.0;      // the scale this step's gradients carried
  bool at_min_loss_scale = false;   // the scaler cannot lower the scale any more
};

// Values an EngineState leaves on the meta device (those tensors carry dtype and shape
// only; a chunk run keeps the values in its NVMe tier, or as 8-bit codes and block
// scales that a checkpoint stores packed): the checkpoint writer reads each one as it
// writes it, so the values never sit in host memory all at once. Read(map,
// name), `map` one of "params", "exp_avg", "exp_avg_sq": the values, valid until the
// next Read or Finish. Finish after the last Read (also after a failed write).
// Position(map, name): where the values are stored, as a sort key; reading a file's
// deferred tensors in increasing Position reads each stored unit (an NVMe tier chunk,
// whose master, m and v one read brings in) once per file.
class DeferredValues {
 public:
  virtual ~DeferredValues() = default;
  virtual at::Tensor Read(const std::string& map, const std::string& name) = 0;
  virtual std::array<int64_t, 3> Position(const std::string& map, const std::string& name) const = 0;
  virtual void Finish() = 0;
  // Whether reading goes to the NVMe tier (then the writer reads as it writes, on the
  // training thread); false: the values are in memory, so a snapshot may read them all
  // for a background write (ReadDeferredValues) when the host has room.
  virtual bool reads_tier() const { return true; }
};

// The training state by parameter name, independent of the chunk layout (checkpoints).
// Tensors are fp32 values; they may be views of live state (Save) until copied, or
// meta-device placeholders whose values `deferred` reads.
struct EngineState {
  models::TensorMap params;                   // name -> fp32 value (masters in chunk runs)
  models::TensorMap exp_avg, exp_avg_sq;      // name -> Adam moments (absent: never updated)
  std::map<std::string, int64_t> adam_steps;  // name -> updates applied (bias correction)
  nlohmann::json extra = nlohmann::json::object();  // engine-specific: loss scaler, chunk warm-up
  // Where the tensors came from, for error messages (empty: in memory).
  std::string params_file, optimizer_file;
  // The meta-device tensors' values (null: every tensor is in memory). A state with
  // deferred values is written on the training thread, not in the background.
  std::shared_ptr<DeferredValues> deferred;
};

// Reads every deferred value of `state` into a host tensor of its own (in Position order,
// each stored unit once per map), finishes and drops the reader: `state` then holds all
// its values in host memory, independent of the engine (a snapshot; tests).
void ReadDeferredValues(EngineState& state);

class TrainingEngine {
 public:
  virtual ~TrainingEngine() = default;

  // Gradients to zero. `lr`: this step's learning rate, the one OptimizerStep will get
  // (an engine may update ahead: optimizer.speculation_slots).
  virtual void BeginStep(double lr) = 0;
  // Forward of one of the step's `accum_steps` micro-batches (on device()); the loss is
  // divided by `loss_divisor` (detached value for logging: loss.detach()); the accuracy
  // counts are not.
  virtual models::LossOutput Forward(const models::Batch& batch, int64_t accum_steps, double loss_divisor) = 0;
  // Every micro-batch of the step at once, block-major (the vertical schedule;
  // models::TrainableModel::LossMany); loss m divided by loss_divisors[m]. One Backward
  // of their sum follows.
  virtual std::vector<models::LossOutput> ForwardMany(const std::vector<models::Batch>& batches,
                                                      const std::vector<double>& loss_divisors) = 0;
  virtual void Backward(const at::Tensor& loss) = 0;
  // Forward and backward of every micro-batch of one step (host batches; each moved to
  // device() when its turn comes) in the schedule set_accumulation chose. Between
  // BeginStep and SyncGradients. `loss_divisors`: micro-batch m's loss (a mean over its
  // targets) is divided by loss_divisors[m]; empty: each by the number of micro-batches
  // (micro-batches of equal weight).
  virtual ForwardBackwardResult ForwardBackward(const std::vector<models::Batch>& micro_batches,
                                                const std::vector<double>& loss_divisors = {});
  // `vertical`: ForwardMany over all micro-batches, one backward; otherwise each
  // micro-batch's forward and backward in turn. `sync_phases` (logging.step_breakdown):
  // phase boundaries wait for the device, so each phase's time is its own.
  // Now, at a phase boundary of a step: after waiting for the device when
  // set_accumulation asked to time phases apart.
  std::chrono::steady_clock::time_point PhaseBoundary() const;
  void set_accumulation(bool vertical, bool sync_phases) {
    vertical_ = vertical;
    sync_phases_ = sync_phases;
  }
  // Where gradients of all micro-batches are complete (ranks reduce them here).
  virtual void SyncGradients() {}
  // Throws std::runtime_error when the gradient norm is non-finite and no loss scaler
  // can skip the step.
  virtual StepOutcome OptimizerStep(double lr, double max_norm) = 0;
  virtual void EndStep(int64_t step) {}  // `step`: optimizer steps done, counted from 1

  virtual void BeginEval() = 0;
  virtual models::LossOutput EvalLoss(const models::Batch& batch) = 0;
  virtual void EndEval() = 0;

  // Engine fields of the metrics line of a logged step (chunk counters), and of the result.
  virtual void AddStepMetrics(MetricFields& fields) {}
  virtual void FillResult(TrainResult& result) const {}

  // The state by name; with collective_save(), this rank's share of it (every parameter
  // is in exactly one rank's share) and every parameter's adam_steps.
  virtual EngineState Save() const = 0;
  // Every parameter's fp32 value by name, whole on every rank (collective with
  // collective_save(); an HF export).
  virtual models::TensorMap GatherParams() const { return Save().params; }
  // The trainable parameters' fp32 values (LoRA: the adapters, not the frozen base),
  // whole on every rank; collective with collective_save().
  virtual models::TensorMap GatherTrainableParams() const { return Save().params; }
  // Throws c10::Error naming the tensor when a name or shape does not match the model.
  virtual void Load(const EngineState& state) = 0;

  virtual at::Device device() const = 0;
  // Whether Save() is a collective every rank must call at the same step (ZeRO: each
  // rank holds part of the state); each rank then writes its share (a sharded checkpoint).
  virtual bool collective_save() const { return false; }

 private:
  bool vertical_ = false;
  bool sync_phases_ = false;
};

// Milliseconds from `a` to `b` (phase boundaries: PhaseBoundary).
inline double MsBetween(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

}  // namespace ps::trainer
