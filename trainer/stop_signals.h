// StopSignals: SIGTERM, SIGINT and SIGUSR1 (what Slurm sends with --signal=USR1@90) ask
// a run to stop: Train() finishes the current step, writes a checkpoint, logs why, and
// main exits with kExitStoppedBySignal. A second signal ends the process at once
// (status 128 + signal; the last complete checkpoint stays valid).
// The handler only stores the signal number in an atomic: the one process-wide
// variable in ps_train, because a signal handler cannot be handed an object.
// Construct once, in main, before training; not copyable.
#pragma once

#include <atomic>

namespace ps::trainer {

// "checkpoint written after a stop signal; requeue me" (see README, Checkpoints).
constexpr int kExitStoppedBySignal = 42;

class StopSignals {
 public:
  StopSignals();   // installs the handlers
  ~StopSignals();  // restores the previous ones
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // The signal number received first, 0 while none; Train() polls it between steps.
  const std::atomic<int>& requested() const;
};

}  // namespace ps::trainer
