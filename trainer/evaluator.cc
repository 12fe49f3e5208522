#include "trainer/evaluator.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "trainer/logging/step_record.h"

namespace ps::trainer {

Evaluator::Evaluator(const TrainConfig& train, bool whole_set, EvalMean mean, ValidBatches valid,
                     TrainingEngine& engine, StepLogger& logger)
    : train_(train), whole_set_(whole_set), mean_(mean), valid_(std::move(valid)), engine_(engine), logger_(logger) {}

std::optional<EvalResult> Evaluator::MaybeEvaluate(int64_t step, int64_t max_steps) {
  if (!valid_) return std::nullopt;
  const bool due = step == max_steps || (train_.eval_every > 0 && step % train_.eval_every == 0);
  if (!due) return std::nullopt;
  const EvalResult eval = Evaluate();
  logger_.LogEval(eval, step);
  return eval;
}

EvalResult Evaluator::Evaluate() {
  const std::unique_ptr<BatchSource> batches = valid_();
  engine_.BeginEval();
  struct EndEval {  // also when a batch throws
    TrainingEngine& e;
    ~EndEval() { e.EndEval(); }
  } end{engine_};
  const int64_t examples = whole_set_ ? batches->samples_per_epoch() : train_.eval_steps * train_.micro_batch_size;
  double sum = 0.0, weights = 0.0;
  AccuracyCounts counts;
  for (int64_t done = 0; done < examples;) {
    const int64_t n = std::min(train_.micro_batch_size, examples - done);
    const models::Batch host_batch = batches->Next(n);
    // The batch's loss is a mean over its examples, or over its counted targets.
    const double weight = mean_ == EvalMean::kTargets ? host_batch.labels.ne(-100).sum().item<double>()
                                                      : static_cast<double>(n);
    const models::LossOutput out = engine_.EvalLoss(host_batch.To(engine_.device()));
    if (weight > 0) sum += out.loss.item<double>() * weight;
    weights += weight;
    counts.Add(out);
    done += n;
  }
  return {weights > 0 ? sum / weights : std::numeric_limits<double>::quiet_NaN(), counts.Share(nullptr)};
}

}  // namespace ps::trainer
