// ps_prep's progress on stderr: a bar redrawn in place on a terminal, else a plain line
// every 10 s; and the human-readable numbers of its summary. Main thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace ps::prep {

// "1.2 MB", "950 B" (powers of 1000).
std::string HumanBytes(double bytes);
// "1.23M", "4.5k", "12".
std::string HumanCount(double n);

class Progress {
 public:
  // `total_bytes`: the input size that makes 100%.
  explicit Progress(int64_t total_bytes);

  // `bytes` of input consumed, `tokens` written so far; prints when it is time to.
  void Update(int64_t bytes, int64_t tokens);
  // Ends the bar (terminal only).
  void Done(int64_t bytes, int64_t tokens);
  double elapsed_s() const;

 private:
  using Clock = std::chrono::steady_clock;
  void Print(int64_t bytes, int64_t tokens) const;

  int64_t total_bytes_;
  bool tty_;
  Clock::time_point start_, last_;
};

}  // namespace ps::prep
