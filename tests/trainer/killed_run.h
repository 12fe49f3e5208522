// TrainKilledAfter: the run `config` describes, ended after step `kill_at` with what a
// process killed there leaves on disk: the periodic checkpoints (checkpoint.every_steps)
// of the steps before it, none of `kill_at` itself and none at the end. Built from the
// public interface, with no hook in the training loop: the same config with
// train.max_steps = kill_at and checkpoint.at_end = false, and the LR schedule's decay
// length written out, so the rates of those steps are the full run's. Requires `kill_at`
// before max_steps and off the checkpoint cadence (a checkpoint due at `kill_at` would be
// written), and a schedule whose rates do not move with max_steps once the decay length
// is given (not wsd, whose decay starts max_steps - decay_steps in). What differs from a
// real kill is only what a completed run logs: step k's eval, the summary line, and
// the HF export when checkpoint.export_hf is on (no test here compares those). Throws
// std::logic_error when a requirement fails (no Catch here: tests include tests/catch.h
// last, after c10).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "optim/lr_schedule.h"
#include "trainer/config/config.h"
#include "trainer/train_loop.h"

namespace ps::testing {

inline trainer::TrainResult TrainKilledAfter(trainer::Config config, int64_t kill_at,
                                             const trainer::TrainOptions& options = {}) {
  const bool on_cadence = config.checkpoint.every_steps > 0 && kill_at % config.checkpoint.every_steps == 0;
  if (kill_at >= config.train.max_steps || on_cadence || config.checkpoint.every_minutes != 0 ||
      config.lr_schedule.type == optim::ScheduleType::kWsd) {
    throw std::logic_error("TrainKilledAfter(" + std::to_string(kill_at) +
                           "): needs a step before max_steps, off the checkpoint cadence, no every_minutes, not wsd");
  }
  // The decay's length as the whole run has it (by default until max_steps).
  config.lr_schedule.decay_steps =
      optim::LrSchedule(config.optimizer.lr, config.lr_schedule, config.train.max_steps).decay_steps();
  config.train.max_steps = kill_at;
  config.checkpoint.at_end = false;
  const trainer::TrainResult result = trainer::Train(config, options);
  if (result.losses.size() != static_cast<size_t>(kill_at - result.start_step)) {
    throw std::logic_error("TrainKilledAfter: the run did not reach step " + std::to_string(kill_at));
  }
  return result;
}

}  // namespace ps::testing
