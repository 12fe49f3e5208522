// Eviction policies: which device-resident chunks leave the device when room is needed.
//
// BeladyPolicy uses the warm-up access trace as an oracle (evict the chunk whose next
// use is furthest away; never-used chunks first; wrap-around into the next iteration;
// ties to the lower id). LruPolicy is the fallback before a trace exists. Both only
// rank the candidates they are given; the runtime passes evictable chunks only.
#pragma once

#include <cstdint>
#include <vector>

namespace ps::chunkmem {

struct EvictionCandidate {
  int chunk_id;
  int64_t bytes;
};

// Moments at which each chunk was accessed in one traced iteration.
class AccessTrace {
 public:
  void Record(int chunk_id, int moment);
  void set_total_moments(int total) { total_moments_ = total; }
  int total_moments() const { return total_moments_; }
  // First use strictly after `moment`; wraps to first use + total_moments; a chunk
  // never accessed gets 2 * total_moments + 1 (evicted first).
  int64_t NextUse(int chunk_id, int moment) const;
  bool empty() const { return moments_.empty(); }
  // Chunks accessed at `moment` (0 <= moment < total_moments), ascending ids.
  std::vector<int> ChunksAt(int moment) const;
  // [chunk] -> sorted moments (chunks never recorded may be missing at the end).
  const std::vector<std::vector<int>>& chunk_moments() const { return moments_; }

 private:
  std::vector<std::vector<int>> moments_;  // [chunk] -> sorted moments
  int total_moments_ = 0;
};

class EvictionPolicy {
 public:
  virtual ~EvictionPolicy() = default;
  // Candidates in eviction order, as many as needed to free `need_bytes` (all of them
  // if they cannot).
  virtual std::vector<int> Choose(std::vector<EvictionCandidate> candidates, int64_t need_bytes,
                                  int moment) const = 0;
};

class BeladyPolicy final : public EvictionPolicy {
 public:
  // Keeps a reference: the trace must outlive the policy (temporaries are refused).
  explicit BeladyPolicy(const AccessTrace& trace) : trace_(trace) {}
  explicit BeladyPolicy(AccessTrace&&) = delete;
  std::vector<int> Choose(std::vector<EvictionCandidate> candidates, int64_t need_bytes,
                          int moment) const override;

 private:
  const AccessTrace& trace_;
};

class LruPolicy final : public EvictionPolicy {
 public:
  // `tick` is any increasing counter (the runtime uses its access counter).
  void Touch(int chunk_id, int64_t tick);
  std::vector<int> Choose(std::vector<EvictionCandidate> candidates, int64_t need_bytes,
                          int moment) const override;

 private:
  std::vector<int64_t> last_use_;  // [chunk] -> tick, -1 = never
};

}  // namespace ps::chunkmem
