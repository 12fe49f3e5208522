// Train: one training run. Opens the data, resolves the output folder and the
// checkpoint to resume from (checkpoint.resume), builds the TrainingEngine (plain or
// chunks, engine.h), then loops over optimizer steps: micro-batches with gradient
// accumulation, LR schedule, clipping, metrics, evaluation, periodic checkpoints, and a
// stop on a signal (checkpoint, then return). Writes <run.output_dir>/metrics.jsonl and
// config.resolved.yaml. Single-threaded caller; LibTorch parallelises ops internally
// (run.threads); a checkpoint may be written by the Checkpointer's thread.
#pragma once

#include <atomic>
#include <cstdint>

#include "comm/communicator.h"
#include "trainer/config/config.h"
#include "trainer/engine/train_result.h"

namespace ps::trainer {


struct TrainOptions {
  // Set (to a signal number) by StopSignals; polled after every step. Null = none.
  const std::atomic<int>* stop_requested = nullptr;
  // The ranks of a data-parallel run (main builds it from distributed.*); null = one
  // process. Rank 0 alone writes the output folder, metrics and checkpoints; every rank
  // reads its own micro-batches and the logged loss is the mean over ranks. Not owned.
  comm::Communicator* comm = nullptr;
  int local_rank = 0;  // picks the GPU: local_rank % device count
};

// Throws ConfigError for inconsistent settings (and a checkpoint of another model or
// an output folder of another run), c10::Error for bad data files and checkpoints, and
// std::runtime_error when the loss becomes non-finite, fp16 diverges, or a write fails.
TrainResult Train(const Config& config, const TrainOptions& options = {});

}  // namespace ps::trainer
