#include "optim/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace ps::optim {

LrSchedule::LrSchedule(double peak_lr, const LrScheduleConfig& config, int64_t max_steps)
    : peak_lr_(peak_lr),
      config_(config),
      decay_steps_(config.decay_steps > 0 ? config.decay_steps
                   : config.type == ScheduleType::kWsd ? std::max<int64_t>(1, max_steps / 10)
                                                       : std::max<int64_t>(1, max_steps - config.warmup_steps)),
      max_steps_(max_steps) {}

double LrSchedule::LrAt(int64_t step) const {
  if (step < config_.warmup_steps) {
    return peak_lr_ * static_cast<double>(step + 1) / static_cast<double>(config_.warmup_steps);
  }
  const double progress =
      std::min(1.0, static_cast<double>(step - config_.warmup_steps) / decay_steps_);
  const double min_lr = config_.min_lr;
  switch (config_.type) {
    case ScheduleType::kConstant:
      return peak_lr_;
    case ScheduleType::kLinear:
      return peak_lr_ + (min_lr - peak_lr_) * progress;
    case ScheduleType::kWsd: {
      const int64_t decay_start = std::max(config_.warmup_steps, max_steps_ - decay_steps_);
      if (step < decay_start) return peak_lr_;
      const double t = std::min(1.0, static_cast<double>(step - decay_start + 1) / decay_steps_);
      return peak_lr_ + (min_lr - peak_lr_) * t;
    }
    case ScheduleType::kCosine:
      return min_lr + 0.5 * (peak_lr_ - min_lr) * (1.0 + std::cos(M_PI * progress));
  }
  return peak_lr_;
}

}  // namespace ps::optim
