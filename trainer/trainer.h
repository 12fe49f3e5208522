// Trainer: the training loop of one run over components that each decide for
// themselves whether they run after a step: the logger (step_logger.h), the evaluator
// (evaluator.h), the checkpointing policy with the agreed stop signal
// (checkpoint_policy.h) and the divergence stop (divergence_guard.h). The engine
// (engine.h) runs the step, its accumulation schedule included. Train() (train_loop.h)
// builds the parts from the config; tests build them around a fake engine.
// Training thread only.
#pragma once

#include <atomic>
#include <c10/core/Device.h>
#include <cstdint>
#include <string>

#include "comm/communicator.h"
#include "optim/lr_schedule.h"
#include "trainer/checkpoint_policy.h"
#include "trainer/divergence_guard.h"
#include "trainer/engine/engine.h"
#include "trainer/engine/train_result.h"
#include "trainer/evaluator.h"
#include "trainer/io/checkpoint.h"
#include "trainer/logging/step_logger.h"
#include "trainer/run_data.h"

namespace ps::trainer {

// The components a Trainer drives; not owned.
struct TrainerParts {
  TrainingEngine& engine;
  BatchSource& batches;  // this rank's training micro-batches
  StepLogger& logger;
  Evaluator& evaluator;
  CheckpointPolicy& checkpoints;
};

// What the loop itself needs to know.
struct TrainerSettings {
  int64_t max_steps = 0;
  int64_t micro_batch_size = 0;
  int64_t accumulation_steps = 1;  // micro-batches per step on this rank
  int64_t global_batch_size = 0;   // sequences per step over all ranks
  int64_t tokens_per_step = 0;     // global batch x sequence length
  double grad_clip = 0;            // train.grad_clip; 0 = off
  bool records_accuracy = false;   // the model counts predictions (TrainResult::accuracies)
  // Micro-batches weighted by their counted targets over the global batch
  // (loss_divisors.h; data.format: sft); false: equal weights.
  bool target_weighted_loss = false;
  // Set (to a signal number) by StopSignals; read after every step. Null: none.
  const std::atomic<int>* stop_requested = nullptr;
  comm::Communicator* comm = nullptr;  // the run's ranks (loss mean, accuracy); null: one process
  at::Device device = at::kCPU;        // for the generator states a checkpoint holds
  // Checkpoints record these: the run (name, folder, fingerprint), its resolved config
  // and the writer's version.
  RunIdentity run;
  std::string config_yaml;
  std::string version;
};

class Trainer {
 public:
  Trainer(TrainerParts parts, const optim::LrSchedule& schedule, const optim::PrecisionConfig& precision,
          TrainerSettings settings);

  // Before Run: restores `checkpoint` (read from `path`) into the engine, the batches,
  // the generators and the loop's counters; Run then goes on from its step.
  void Resume(const CheckpointContents& checkpoint, const std::string& path);
  // Steps from the first not done to max_steps, or to a stop signal (checkpoint written,
  // result.stop_signal set). Throws what the divergence stop and the components throw.
  TrainResult Run();

  int64_t start_step() const { return start_step_; }  // steps done before Run
  // Whether Run reached max_steps (false: a stop signal).
  bool completed() const { return completed_; }

 private:
  StepRecord Step(int64_t step);
  CheckpointContents Contents(int64_t step) const;
  void Record(const StepRecord& r, TrainResult& result) const;

  TrainerParts parts_;
  const optim::LrSchedule& schedule_;
  TrainerSettings s_;
  DivergenceGuard divergence_;
  int64_t start_step_ = 0;   // steps done before Run
  int64_t tokens_seen_ = 0;
  SampleSchedule samples_;   // how consumed_samples grows in this run's segment
  bool completed_ = false;
};

}  // namespace ps::trainer
