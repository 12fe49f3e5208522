// WordCache: the ids of recently encoded words (BPE's merges are the costly step and
// natural text repeats its words), shared by all threads of one tokenizer. Sharded by the
// word's hash, each shard behind a reader-writer lock; bounded: once a shard is full,
// new words are not cached (as HF's BPE cache). Owned by the tokenizer; any thread.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/flat_maps.h"

namespace ps::tokenizer {

class WordCache {
 public:
  static constexpr size_t kMaxWordBytes = 48;  // longer words are not cached

  explicit WordCache(size_t capacity_words) : capacity_per_shard_(capacity_words / kShards) {}

  // Appends the cached ids of `word` to `ids`; false when it is not cached.
  bool Lookup(std::string_view word, std::vector<int32_t>* ids) const {
    if (word.size() > kMaxWordBytes || capacity_per_shard_ == 0) return false;
    const Shard& shard = shards_[HashBytes(word) >> 58];
    std::shared_lock<std::shared_mutex> lock(shard.mutex);
    const auto it = shard.words.find(std::string(word));
    if (it == shard.words.end()) return false;
    ids->insert(ids->end(), it->second.begin(), it->second.end());
    return true;
  }

  void Insert(std::string_view word, const int32_t* ids, size_t count) const {
    if (word.size() > kMaxWordBytes || capacity_per_shard_ == 0) return;
    Shard& shard = shards_[HashBytes(word) >> 58];
    std::unique_lock<std::shared_mutex> lock(shard.mutex);
    if (shard.words.size() >= capacity_per_shard_) return;
    shard.words.emplace(std::string(word), std::vector<int32_t>(ids, ids + count));
  }

 private:
  static constexpr size_t kShards = 64;  // HashBytes(word) >> 58 picks one
  struct alignas(64) Shard {
    mutable std::shared_mutex mutex;
    std::unordered_map<std::string, std::vector<int32_t>> words;
  };
  const size_t capacity_per_shard_;
  mutable std::array<Shard, kShards> shards_;
};

}  // namespace ps::tokenizer
