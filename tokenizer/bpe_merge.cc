#include "tokenizer/bpe_merge.h"

#include <climits>
#include <functional>
#include <queue>

namespace ps::tokenizer {
namespace {

// Words with this many initial symbols or more merge through a heap (O(n log n)); shorter
// ones by rescanning an array of pair ranks, which is faster for the usual few symbols.
constexpr size_t kHeapMergeMinSymbols = 128;

// Repeatedly merges the adjacent pair of lowest rank (the leftmost one among equals),
// which is the order of HF's heap.
void MergeByScan(const PairMap& merges, std::vector<int32_t>* symbols) {
  std::vector<int32_t>& s = *symbols;
  if (s.size() < 2) return;
  // ranks[i]: rank of the pair (s[i], s[i + 1]), INT_MAX when it does not merge.
  int32_t ranks_buf[kHeapMergeMinSymbols];
  int32_t merged_buf[kHeapMergeMinSymbols];
  size_t n = s.size();
  for (size_t i = 0; i + 1 < n; ++i) {
    const PairMap::Value* v = merges.Find(s[i], s[i + 1]);
    ranks_buf[i] = v ? v->rank : INT_MAX;
    merged_buf[i] = v ? v->merged_id : -1;
  }
  while (n > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < n; ++i) {
      if (ranks_buf[i] < ranks_buf[best]) best = i;
    }
    if (ranks_buf[best] == INT_MAX) break;
    s[best] = merged_buf[best];
    for (size_t i = best + 1; i + 1 < n; ++i) {
      s[i] = s[i + 1];
      ranks_buf[i] = ranks_buf[i + 1];
      merged_buf[i] = merged_buf[i + 1];
    }
    --n;
    auto refresh = [&](size_t i) {
      const PairMap::Value* v = merges.Find(s[i], s[i + 1]);
      ranks_buf[i] = v ? v->rank : INT_MAX;
      merged_buf[i] = v ? v->merged_id : -1;
    };
    if (best > 0) refresh(best - 1);
    if (best + 1 < n) refresh(best);
  }
  s.resize(n);
}

void MergeByHeap(const PairMap& merges, std::vector<int32_t>* symbols) {
  std::vector<int32_t>& s = *symbols;
  const int32_t n = static_cast<int32_t>(s.size());
  std::vector<int32_t> prev(n), next(n);
  std::vector<uint8_t> alive(n, 1);
  for (int32_t i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  struct Entry {
    int32_t rank, pos, merged_id;
    bool operator>(const Entry& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
  auto push = [&](int32_t i) {
    if (i < 0 || next[i] < 0) return;
    if (const PairMap::Value* v = merges.Find(s[i], s[next[i]])) heap.push({v->rank, i, v->merged_id});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    const Entry top = heap.top();
    heap.pop();
    const int32_t i = top.pos;
    if (!alive[i] || next[i] < 0) continue;
    const PairMap::Value* v = merges.Find(s[i], s[next[i]]);
    if (v == nullptr || v->merged_id != top.merged_id) continue;  // stale entry
    const int32_t j = next[i];
    s[i] = top.merged_id;
    alive[j] = 0;
    next[i] = next[j];
    if (next[j] >= 0) prev[next[j]] = i;
    push(prev[i]);
    push(i);
  }
  int32_t out = 0;
  for (int32_t i = 0; i < n; ++i) {
    if (alive[i]) s[out++] = s[i];
  }
  s.resize(out);
}

}  // namespace

void MergeSymbols(const PairMap& merges, std::vector<int32_t>* symbols) {
  if (symbols->size() >= kHeapMergeMinSymbols) {
    MergeByHeap(merges, symbols);
  } else {
    MergeByScan(merges, symbols);
  }
}

}  // namespace ps::tokenizer
