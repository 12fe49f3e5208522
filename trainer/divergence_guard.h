// DivergenceGuard: the divergence stop. Decides, step by step, whether training can go
// on: a step no loss scaler tolerates was skipped (its gradient norm non-finite, or
// above optim::kMaxUpdateGradNorm after clipping), the loss is non-finite,
// or fp16 has skipped precision.max_skips_at_min_scale steps in a row at the minimum
// loss scale (after that every step would be skipped). Each ends the run with a
// std::runtime_error that says what to change. Training thread only.
#pragma once

#include <cstdint>

#include "optim/optim_config.h"
#include "trainer/engine/engine.h"
#include "trainer/logging/step_record.h"

namespace ps::trainer {

class DivergenceGuard {
 public:
  explicit DivergenceGuard(const optim::PrecisionConfig& precision)
      : limit_(precision.max_skips_at_min_scale), min_scale_(precision.min_loss_scale) {}

  // After OptimizerStep of step `step` (counted from 1), before EndStep: throws when the
  // update was skipped (a non-finite or too large norm) and no loss scaler tolerates it.
  void CheckUpdate(const StepOutcome& outcome, int64_t step) const;
  // After the step: throws for a non-finite loss (unless the scaler skipped the step)
  // and for the limit of consecutive skips at the minimum scale.
  void CheckStep(const StepRecord& record, int64_t step);

  // Consecutive skips at the minimum scale so far (checkpointed and restored).
  int64_t run() const { return run_; }
  void set_run(int64_t n) { run_ = n; }

 private:
  int64_t limit_;
  double min_scale_;
  int64_t run_ = 0;
};

}  // namespace ps::trainer
