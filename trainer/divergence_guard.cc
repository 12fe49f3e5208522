#include "trainer/divergence_guard.h"

#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>

namespace ps::trainer {

void DivergenceGuard::CheckUpdate(const StepOutcome& outcome, int64_t step) const {
  if (outcome.skipped && !outcome.overflow_tolerated) {
    char norm[32], why[96] = "";
    std::snprintf(norm, sizeof norm, "%g", outcome.grad_norm);
    if (std::isfinite(outcome.grad_norm)) {
      std::snprintf(why, sizeof why, ", above what Adam's fp32 second moment holds (%g after clipping)",
                    optim::kMaxUpdateGradNorm);
    }
    // At the very first step no update has happened yet: the weights it started from are the suspects.
    const char* what_to_do = step == 1 && !std::isfinite(outcome.grad_norm)
                                 ? " (the first step: do the initial weights, e.g. model.init_from's, hold NaN or inf?)"
                                 : " (lower optimizer.lr or set train.grad_clip)";
    throw std::runtime_error("gradient norm became " + std::string(norm) + " at step " + std::to_string(step) + why +
                             what_to_do);
  }
}

void DivergenceGuard::CheckStep(const StepRecord& record, int64_t step) {
  if (!std::isfinite(record.loss) && !record.outcome.overflow_tolerated) {
    throw std::runtime_error("training loss became " + std::to_string(record.loss) + " at step " +
                             std::to_string(step) + " (lower optimizer.lr or set train.grad_clip)");
  }
  run_ = record.outcome.skipped && record.outcome.at_min_loss_scale ? run_ + 1 : 0;
  if (limit_ > 0 && run_ >= limit_) {
    throw std::runtime_error("fp16 training diverged: the last " + std::to_string(run_) + " steps (to step " +
                             std::to_string(step) + ") all overflowed at the minimum loss scale " +
                             std::to_string(min_scale_) + " (precision.min_loss_scale), so every step is skipped; "
                             "lower optimizer.lr, set train.grad_clip, use precision.dtype: bf16, or resume from an "
                             "earlier checkpoint (precision.max_skips_at_min_scale sets this limit)");
  }
}

}  // namespace ps::trainer
