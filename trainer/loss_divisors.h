// How a step's micro-batch losses add up to the loss of the global batch when
// micro-batches count different numbers of targets (chat data, data.format: sft: labels
// of -100 are not trained on). Each micro-batch's loss is the mean over its own counted
// targets; dividing it by N / (c_m x world), with c_m its counted targets and N those of
// the whole global batch (every micro-batch of every rank), makes the step's loss and
// gradients the mean over all N targets once the ranks average their gradients, so k
// micro-batches equal one batch k times the size. (A mean of the micro-batches' means
// would weight a target of a short micro-batch more: the gradient-accumulation bug of
// the 2024 Python trainers.)
#pragma once

#include <c10/core/Device.h>

#include <vector>

#include "comm/communicator.h"
#include "models/batch.h"

namespace ps::trainer {

// One divisor per micro-batch (host batches, labels defined). With `comm` (not owned;
// null: one process) the target count is summed over its ranks: a collective every
// rank calls with its own micro-batches. A micro-batch without counted targets gets 1
// (its loss is 0); a global batch without any: every divisor 1.
std::vector<double> TargetWeightedDivisors(const std::vector<models::Batch>& micro_batches, comm::Communicator* comm,
                                           at::Device device);

}  // namespace ps::trainer
