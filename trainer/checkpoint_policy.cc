#include "trainer/checkpoint_policy.h"

#include <ATen/ops/full.h>
#include <spdlog/spdlog.h>

namespace ps::trainer {

CheckpointPolicy::CheckpointPolicy(const CheckpointConfig& config, int64_t max_steps, SaveRanks ranks,
                                   Checkpointer& checkpointer, StepLogger& logger)
    : config_(config), max_steps_(max_steps), ranks_(ranks), checkpointer_(checkpointer), logger_(logger) {}

int CheckpointPolicy::AgreeMax(int value) const {
  if (ranks_.comm == nullptr) return value;
  at::Tensor flag =
      at::full({1}, static_cast<int64_t>(value), at::TensorOptions().dtype(at::kLong).device(ranks_.device));
  ranks_.comm->AllReduce(flag, comm::ReduceOp::kMax)->Wait();
  return static_cast<int>(flag.item<int64_t>());
}

int CheckpointPolicy::MaybeSave(int64_t step, int signal, const ContentsFn& contents) {
  signal = AgreeMax(signal);  // every rank stops at the same step
  bool due = signal != 0 || (step == max_steps_ && config_.at_end) || checkpointer_.Due(step);
  // A time-based interval may fall due on one rank first: a collective save is agreed.
  if (ranks_.collective_save) due = AgreeMax(due ? 1 : 0) != 0;
  const bool saves_here = ranks_.collective_save || ranks_.comm == nullptr || ranks_.comm->rank() == 0;
  if (due && saves_here) {
    if (signal != 0) spdlog::warn("signal {} received: saving a checkpoint at step {} and stopping", signal, step);
    checkpointer_.Save(contents(step));  // a collective save runs on every rank, each writing its share
  }
  if (signal != 0) checkpointer_.Wait();
  RecordFinished();
  if (signal != 0) logger_.Record(JsonLine().Add("stopped_by_signal", static_cast<int64_t>(signal)).Add("step", step));
  return signal;
}

void CheckpointPolicy::Finish() {
  checkpointer_.Wait();
  RecordFinished();
}

void CheckpointPolicy::RecordFinished() {
  for (const auto& r : checkpointer_.TakeFinished()) {
    logger_.Record(JsonLine()
                       .Add("checkpoint_step", r.step)
                       .Add("checkpoint_path", r.path)
                       .Add("checkpoint_bytes", r.bytes)
                       .Add("save_snapshot_s", r.snapshot_s)
                       .Add("save_write_s", r.write_s)
                       .Add("save_background", r.background));
  }
}

}  // namespace ps::trainer
