// WaitDeadline: a deadline for a wait that nothing else can interrupt. The rendezvous
// is one: c10d's TCPStore blocks in its constructor, and a program on the rendezvous
// port that accepts connections but never answers held a rank far past
// distributed.init_timeout_s, deaf to SIGTERM (whose handler only sets a flag). While a
// WaitDeadline lives, a thread of its own checks every 50 ms; past the deadline, or
// once a stop signal is flagged, it prints `what` and why to stderr and ends the
// process at once (exit 1 at the deadline, 128 + signal on a signal). Only for waits
// before a run writes anything: nothing is saved or flushed on that path.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace ps::trainer {

class WaitDeadline {
 public:
  // `stop`: the stop-signal flag (StopSignals::requested()), or null.
  WaitDeadline(std::string what, std::chrono::milliseconds limit, const std::atomic<int>* stop);
  ~WaitDeadline();  // disarms: the wait ended in time
  WaitDeadline(const WaitDeadline&) = delete;
  WaitDeadline& operator=(const WaitDeadline&) = delete;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

}  // namespace ps::trainer
