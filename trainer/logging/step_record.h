// StepRecord: the figures of one optimizer step, as the Trainer hands them to its
// components (logger, divergence stop, result). AccuracyCounts: a model's prediction
// counts (models::LossOutput::correct / counted) summed over micro-batches and ranks.
#pragma once

#include <ATen/core/Tensor.h>

#include <limits>

#include "comm/communicator.h"
#include "models/trainable.h"
#include "trainer/engine/engine.h"

namespace ps::trainer {

struct StepRecord {
  double loss = 0, lr = 0;  // loss: the mean over the global batch (all ranks)
  double accuracy = std::numeric_limits<double>::quiet_NaN();  // BERT: share of predictions right
  StepOutcome outcome;
  double forward_ms = 0, backward_ms = 0, optimizer_ms = 0, step_s = 0;
};

struct AccuracyCounts {
  at::Tensor correct, counted;  // undefined until a model reports them
  void Add(const models::LossOutput& out);
  // correct / counted, summed over the ranks of `comm` too (every rank reports counts or
  // none does; null: this process only). NaN when nothing was counted.
  double Share(comm::Communicator* comm) const;
};

}  // namespace ps::trainer
