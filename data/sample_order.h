// SampleOrder: the order in which a run visits `num_samples` samples, epoch after epoch:
// the global sample stream 0, 1, 2, ... maps to sample indices, each epoch a seeded
// permutation (or the identity without shuffling). A pure function of (seed, epoch), so
// a resumed run that restores its consumed-sample count sees the same order.
#pragma once

#include <cstdint>
#include <vector>

namespace ps::data {

class SampleOrder {
 public:
  SampleOrder(int64_t num_samples, bool shuffle, uint64_t seed);

  // The sample index of global sample `global_sample` (>= 0).
  int64_t IndexOf(int64_t global_sample);
  int64_t num_samples() const { return num_samples_; }

 private:
  int64_t num_samples_;
  bool shuffle_;
  uint64_t seed_;
  int64_t cached_epoch_ = -1;
  std::vector<int64_t> permutation_;  // [num_samples] for cached_epoch_
};

}  // namespace ps::data
