// WordCache: the ids of recently encoded words (BPE's merges are the costly step and
// natural text repeats its words), shared by all threads of one tokenizer without locks:
// an open-addressing table of atomic pointers to immutable entries. A reader loads a
// slot (acquire) and compares; a writer publishes a new entry into an empty slot with a
// compare-and-swap (release). Entries are never replaced or removed; once the table
// holds `capacity_words`, new words are not cached (as HF's BPE cache). Owned by the
// tokenizer, freed with it; any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/flat_maps.h"

namespace ps::tokenizer {

class WordCache {
 public:
  static constexpr size_t kMaxWordBytes = 48;  // longer words are not cached

  explicit WordCache(size_t capacity_words)
      : capacity_words_(capacity_words),
        slot_count_(TableSlotsFor(capacity_words)),
        slots_(new std::atomic<const Entry*>[slot_count_]) {
    for (size_t i = 0; i < slot_count_; ++i) slots_[i].store(nullptr, std::memory_order_relaxed);
  }
  ~WordCache() {
    for (size_t i = 0; i < slot_count_; ++i) delete slots_[i].load(std::memory_order_relaxed);
  }
  WordCache(const WordCache&) = delete;
  WordCache& operator=(const WordCache&) = delete;

  // Appends the cached ids of `word` to `ids`; false when it is not cached.
  bool Lookup(std::string_view word, std::vector<int32_t>* ids) const {
    if (word.size() > kMaxWordBytes) return false;
    const uint64_t hash = HashBytes(word);
    for (size_t i = Start(hash), probes = 0; probes < kMaxProbes; i = (i + 1) & (slot_count_ - 1), ++probes) {
      const Entry* e = slots_[i].load(std::memory_order_acquire);
      if (e == nullptr) return false;
      if (e->hash == hash && e->word == word) {
        ids->insert(ids->end(), e->ids.begin(), e->ids.end());
        return true;
      }
    }
    return false;
  }

  void Insert(std::string_view word, const int32_t* ids, size_t count) const {
    if (word.size() > kMaxWordBytes || size_.load(std::memory_order_relaxed) >= capacity_words_) return;
    const uint64_t hash = HashBytes(word);
    auto entry =
        std::make_unique<const Entry>(Entry{hash, std::string(word), std::vector<int32_t>(ids, ids + count)});
    for (size_t i = Start(hash), probes = 0; probes < kMaxProbes; i = (i + 1) & (slot_count_ - 1), ++probes) {
      const Entry* current = slots_[i].load(std::memory_order_acquire);
      if (current == nullptr) {
        if (slots_[i].compare_exchange_strong(current, entry.get(), std::memory_order_acq_rel)) {
          entry.release();
          size_.fetch_add(1, std::memory_order_relaxed);
          return;
        }
        // Another thread filled the slot first: `current` is its entry.
      }
      if (current->hash == hash && current->word == word) return;
    }
  }

 private:
  struct Entry {
    uint64_t hash;
    std::string word;
    std::vector<int32_t> ids;
  };
  static constexpr size_t kMaxProbes = 32;

  size_t Start(uint64_t hash) const { return (hash >> 20) & (slot_count_ - 1); }

  const size_t capacity_words_;
  const size_t slot_count_;  // a power of two, >= 2 * capacity_words_
  std::unique_ptr<std::atomic<const Entry*>[]> slots_;
  mutable std::atomic<size_t> size_{0};
};

}  // namespace ps::tokenizer
