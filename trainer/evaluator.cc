#include "trainer/evaluator.h"

#include <algorithm>
#include <utility>

#include "trainer/step_record.h"

namespace ps::trainer {

Evaluator::Evaluator(const TrainConfig& train, bool whole_set, ValidBatches valid, TrainingEngine& engine,
                     StepLogger& logger)
    : train_(train), whole_set_(whole_set), valid_(std::move(valid)), engine_(engine), logger_(logger) {}

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
  double sum = 0.0;
  AccuracyCounts counts;
  for (int64_t done = 0; done < examples;) {
    const int64_t n = std::min(train_.micro_batch_size, examples - done);
    const models::Batch batch = batches->Next(n).To(engine_.device());
    const models::LossOutput out = engine_.EvalLoss(batch);
    sum += out.loss.item<double>() * static_cast<double>(n);  // a mean over the batch's examples
    counts.Add(out);
    done += n;
  }
  return {sum / static_cast<double>(examples), counts.Share(nullptr)};
}

}  // namespace ps::trainer
