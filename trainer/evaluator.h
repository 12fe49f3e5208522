// Evaluator: the evaluation component of a run. Decides when it runs (train.eval_every
// steps, and after the last step) and computes the validation loss (and accuracy, for
// models that count predictions) over the same batches every time; the logger reports
// it. A run without validation data has an Evaluator that never runs. Training thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

#include "trainer/config/config.h"
#include "trainer/engine/engine.h"
#include "trainer/logging/step_logger.h"
#include "trainer/run_data.h"

namespace ps::trainer {

// Validation batches from the start of the validation data (RunData::Valid); empty
// function: the run has none.
using ValidBatches = std::function<std::unique_ptr<BatchSource>()>;

// How the validation loss averages.
enum class EvalMean {
  kExamples,  // each batch's loss weighted by its examples
  kTargets,   // by its counted targets (labels other than -100): a mean over every trained token (data.format: sft)
};

class Evaluator {
 public:
  // `whole_set`: labelled examples, each evaluated once per evaluation (the last
  // micro-batch may be smaller), so the accuracy is the validation set's; otherwise
  // train.eval_steps micro-batches of train.micro_batch_size. Not owned: engine, logger.
  Evaluator(const TrainConfig& train, bool whole_set, EvalMean mean, ValidBatches valid, TrainingEngine& engine,
            StepLogger& logger);

  // After step `step` of a run of `max_steps`: evaluates and logs when due.
  std::optional<EvalResult> MaybeEvaluate(int64_t step, int64_t max_steps);
  // The mean loss over the validation batches (a mean over examples), now.
  EvalResult Evaluate();

 private:
  TrainConfig train_;
  bool whole_set_;
  EvalMean mean_;
  ValidBatches valid_;
  TrainingEngine& engine_;
  StepLogger& logger_;
};

}  // namespace ps::trainer
