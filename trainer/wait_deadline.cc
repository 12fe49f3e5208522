#include "trainer/wait_deadline.h"

#include <unistd.h>

#include <cstdlib>
#include <utility>

namespace ps::trainer {

WaitDeadline::WaitDeadline(std::string what, std::chrono::milliseconds limit, const std::atomic<int>* stop) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  thread_ = std::thread([this, what = std::move(what), deadline, limit, stop] {
    std::unique_lock<std::mutex> lock(mu_);
    while (!done_) {
      const int signal = stop ? stop->load() : 0;
      const bool late = std::chrono::steady_clock::now() >= deadline;
      if (signal != 0 || late) {
        const std::string why = signal != 0 ? "stopped by signal " + std::to_string(signal)
                                            : "no answer within " + std::to_string(limit.count() / 1000.0).substr(0, 5) + " s";
        const std::string line = "ps_train: error: " + what + ": " + why + "\n";
        (void)!::write(2, line.data(), line.size());
        std::_Exit(signal != 0 ? 128 + signal : 1);  // the waiting thread cannot be woken
      }
      cv_.wait_for(lock, std::chrono::milliseconds(50));
    }
  });
}

WaitDeadline::~WaitDeadline() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

}  // namespace ps::trainer
