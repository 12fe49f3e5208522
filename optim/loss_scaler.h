// LossScaler: the loss scale of fp16 training, with DeepSpeed's semantics.
//
// Dynamic (precision.loss_scale: 0): the scale starts at 2^initial_scale_power. A step
// whose gradients overflow (inf/NaN) is skipped; the scale halves (never below
// min_loss_scale) only once `hysteresis` overflows have been seen since the hysteresis
// was last refilled (the "delayed shift"); it doubles after `loss_scale_window` steps
// without overflow since the last one, which also refills the hysteresis (with
// consecutive_hysteresis every clean step refills it: only a run of `hysteresis`
// overflows in a row lowers the scale). Static
// (loss_scale > 0): the scale never changes, but overflowing steps are still skipped.
// Off (bf16/fp32): scale 1, nothing is checked by the scaler.
// The state is plain data (State) so checkpoints can save and restore it.
#pragma once

#include <cstdint>
#include <string>

#include "optim/optim_config.h"

namespace ps::optim {

class LossScaler {
 public:
  struct State {
    double scale = 1.0;
    int64_t iteration = 0;            // Update() calls so far
    int64_t last_overflow_iteration = -1;
    int64_t hysteresis_left = 1;      // overflows still tolerated before the scale drops
    int64_t overflows = 0;            // skipped steps so far
  };
  enum class Mode { kOff, kStatic, kDynamic };

  // From precision: fp16 -> dynamic or static by loss_scale; bf16/fp32 -> off.
  // Throws std::invalid_argument on out-of-range settings.
  explicit LossScaler(const PrecisionConfig& config);

  Mode mode() const { return mode_; }
  bool enabled() const { return mode_ != Mode::kOff; }
  double scale() const { return state_.scale; }
  const State& state() const { return state_; }
  void Restore(const State& state) { state_ = state; }

  // After the overflow check of one step. Returns true when the step must be skipped.
  bool Update(bool overflow);

  // "scale=65536 iteration=3 last_overflow_iteration=-1 hysteresis_left=2 overflows=0";
  // Parse throws std::invalid_argument naming the bad field.
  static std::string Serialize(const State& state);
  static State Parse(const std::string& text);

 private:
  Mode mode_;
  PrecisionConfig config_;
  State state_;
};

}  // namespace ps::optim
