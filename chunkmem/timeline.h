// ChunkTimeline: events of the chunk runtime (fetches, evictions, moments) and the chunk
// bytes per tier over time, written as a Chrome trace (chrome://tracing, Perfetto):
// "X" events for copies, "i" events for moments, "C" counters for bytes per tier.
// Recording is bounded by the caller (the trainer records the first few steps only).
// Single-threaded, like the runtime that feeds it.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace ps::chunkmem {

class ChunkTimeline {
 public:
  ChunkTimeline();

  int64_t NowUs() const;
  // A copy of `bytes` of layout chunk `chunk` that ran from `start_us` to now.
  void Copy(const std::string& what, int chunk, int64_t bytes, int64_t start_us);
  void Moment(const std::string& what);
  void Bytes(int64_t device_bytes, int64_t host_bytes);

  size_t num_events() const { return events_.size(); }
  // Writes {"traceEvents": [...]} to `path` (via a temporary file and rename).
  void WriteChromeTrace(const std::string& path) const;

 private:
  struct Event {
    char phase;  // 'X', 'i', 'C'
    std::string name;
    int64_t ts_us;
    int64_t dur_us;
    int chunk;
    int64_t a, b;  // X: bytes; C: device, host bytes
  };
  std::chrono::steady_clock::time_point start_;
  std::vector<Event> events_;
};

}  // namespace ps::chunkmem
