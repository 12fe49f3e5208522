#include "chunkmem/eviction.h"

#include <algorithm>

namespace ps::chunkmem {
namespace {

// Takes candidates in the given order until `need_bytes` are covered.
std::vector<int> TakeUntil(const std::vector<EvictionCandidate>& ordered, int64_t need_bytes) {
  std::vector<int> out;
  int64_t freed = 0;
  for (const auto& c : ordered) {
    if (freed >= need_bytes) break;
    out.push_back(c.chunk_id);
    freed += c.bytes;
  }
  return out;
}

}  // namespace

void AccessTrace::Record(int chunk_id, int moment) {
  if (static_cast<int>(moments_.size()) <= chunk_id) moments_.resize(chunk_id + 1);
  auto& m = moments_[chunk_id];
  if (m.empty() || m.back() != moment) m.insert(std::upper_bound(m.begin(), m.end(), moment), moment);
  total_moments_ = std::max(total_moments_, moment + 1);
}

int64_t AccessTrace::NextUse(int chunk_id, int moment) const {
  const int64_t total = total_moments_;
  if (chunk_id >= static_cast<int>(moments_.size()) || moments_[chunk_id].empty()) return 2 * total + 1;
  const auto& m = moments_[chunk_id];
  auto it = std::upper_bound(m.begin(), m.end(), moment);
  if (it != m.end()) return *it;
  return total + m.front();
}

std::vector<int> AccessTrace::ChunksAt(int moment) const {
  std::vector<int> out;
  for (int c = 0; c < static_cast<int>(moments_.size()); ++c) {
    if (std::binary_search(moments_[c].begin(), moments_[c].end(), moment)) out.push_back(c);
  }
  return out;
}

std::vector<int> BeladyPolicy::Choose(std::vector<EvictionCandidate> candidates, int64_t need_bytes,
                                      int moment) const {
  std::stable_sort(candidates.begin(), candidates.end(), [&](const auto& a, const auto& b) {
    const int64_t na = trace_.NextUse(a.chunk_id, moment), nb = trace_.NextUse(b.chunk_id, moment);
    return na != nb ? na > nb : a.chunk_id < b.chunk_id;
  });
  return TakeUntil(candidates, need_bytes);
}

void LruPolicy::Touch(int chunk_id, int64_t tick) {
  if (static_cast<int>(last_use_.size()) <= chunk_id) last_use_.resize(chunk_id + 1, -1);
  last_use_[chunk_id] = tick;
}

std::vector<int> LruPolicy::Choose(std::vector<EvictionCandidate> candidates, int64_t need_bytes,
                                   int /*moment*/) const {
  auto last = [&](int id) { return id < static_cast<int>(last_use_.size()) ? last_use_[id] : -1; };
  std::stable_sort(candidates.begin(), candidates.end(), [&](const auto& a, const auto& b) {
    const int64_t la = last(a.chunk_id), lb = last(b.chunk_id);
    return la != lb ? la < lb : a.chunk_id < b.chunk_id;
  });
  return TakeUntil(candidates, need_bytes);
}

}  // namespace ps::chunkmem
