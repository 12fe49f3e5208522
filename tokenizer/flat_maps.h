// Open-addressing hash maps of the tokenizers' hot paths, built once at load and then
// read-only (so any number of threads may call Find at once):
//   StringIdMap: token string -> id, looked up by string_view (no allocation per lookup);
//   PairMap: (left id, right id) -> (merge rank, merged id), the BPE merge table.
// Linear probing in a power-of-two table at most half full.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace ps::tokenizer {

// 64-bit FNV-1a, folded with a multiply so that short keys spread over the high bits.
inline uint64_t HashBytes(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h * 0x9E3779B97F4A7C15ull;
}

inline size_t TableSlotsFor(size_t entries) {
  size_t slots = 16;
  while (slots < 2 * entries) slots *= 2;
  return slots;
}

class StringIdMap {
 public:
  // Later insertions of the same key replace the earlier id.
  void Insert(std::string_view key, int32_t id) {
    if (2 * (keys_.size() + 1) > slots_.size()) Rehash(TableSlotsFor(keys_.size() + 1));
    const size_t i = Probe(key);
    if (slots_[i] >= 0) {
      ids_[slots_[i]] = id;
      return;
    }
    slots_[i] = static_cast<int32_t>(keys_.size());
    keys_.emplace_back(key);
    ids_.push_back(id);
  }

  // The id of `key`, or -1.
  int32_t Find(std::string_view key) const {
    if (slots_.empty()) return -1;
    const int32_t e = slots_[Probe(key)];
    return e < 0 ? -1 : ids_[e];
  }

  size_t entries() const { return keys_.size(); }

 private:
  size_t Probe(std::string_view key) const {
    const size_t mask = slots_.size() - 1;
    size_t i = HashBytes(key) >> 20 & mask;
    while (slots_[i] >= 0 && keys_[slots_[i]] != key) i = (i + 1) & mask;
    return i;
  }

  void Rehash(size_t slots) {
    slots_.assign(slots, -1);
    for (size_t e = 0; e < keys_.size(); ++e) slots_[Probe(keys_[e])] = static_cast<int32_t>(e);
  }

  std::vector<std::string> keys_;
  std::vector<int32_t> ids_;
  std::vector<int32_t> slots_;  // index into keys_/ids_, -1 = empty
};

class PairMap {
 public:
  struct Value {
    int32_t rank;
    int32_t merged_id;
  };

  // `entries`: how many Insert calls will follow (sizes the table).
  explicit PairMap(size_t entries = 0) : keys_(TableSlotsFor(entries), kEmpty), values_(keys_.size()) {}

  // Keeps the first (lowest-rank) insertion of a pair, as HF does for duplicate merges.
  void Insert(int32_t left, int32_t right, Value value) {
    const uint64_t key = Key(left, right);
    const size_t i = Probe(key);
    if (keys_[i] == key) return;
    keys_[i] = key;
    values_[i] = value;
  }

  // nullptr when the pair does not merge.
  const Value* Find(int32_t left, int32_t right) const {
    const uint64_t key = Key(left, right);
    const size_t i = Probe(key);
    return keys_[i] == key ? &values_[i] : nullptr;
  }

 private:
  static constexpr uint64_t kEmpty = ~0ull;
  static uint64_t Key(int32_t left, int32_t right) {
    return (uint64_t(uint32_t(left)) << 32) | uint32_t(right);
  }
  size_t Probe(uint64_t key) const {
    const size_t mask = keys_.size() - 1;
    size_t i = (key * 0x9E3779B97F4A7C15ull) >> 24 & mask;
    while (keys_[i] != kEmpty && keys_[i] != key) i = (i + 1) & mask;
    return i;
  }

  std::vector<uint64_t> keys_;
  std::vector<Value> values_;
};

}  // namespace ps::tokenizer
