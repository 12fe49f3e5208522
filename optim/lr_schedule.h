// LR schedule: a pure function of the optimizer step. Warm-up ramps linearly from
// lr/warmup to lr (step 0 gets lr/warmup_steps, never 0), then constant, linear or
// cosine decay to min_lr over decay_steps, then min_lr. WSD (warmup-stable-decay) holds
// lr after warm-up and decays linearly to min_lr over the last decay_steps of max_steps.
#pragma once

#include <cstdint>

#include "optim/optim_config.h"

namespace ps::optim {

class LrSchedule {
 public:
  // `max_steps` is used when config.decay_steps == 0 (decay until the end of training).
  LrSchedule(double peak_lr, const LrScheduleConfig& config, int64_t max_steps);

  // Learning rate for optimizer step `step` (0-based).
  double LrAt(int64_t step) const;
  // The decay's length in steps: config.decay_steps, or by default until max_steps.
  int64_t decay_steps() const { return decay_steps_; }

 private:
  double peak_lr_;
  LrScheduleConfig config_;
  int64_t decay_steps_;
  int64_t max_steps_;
};

}  // namespace ps::optim
