#include "data/sample_order.h"

#include <c10/util/Exception.h>

#include <numeric>
#include <random>

namespace ps::data {

SampleOrder::SampleOrder(int64_t num_samples, bool shuffle, uint64_t seed)
    : num_samples_(num_samples), shuffle_(shuffle), seed_(seed) {
  TORCH_CHECK(num_samples > 0, "SampleOrder needs at least one sample");
}

int64_t SampleOrder::IndexOf(int64_t global_sample) {
  const int64_t epoch = global_sample / num_samples_;
  const int64_t index = global_sample % num_samples_;
  if (!shuffle_) return index;
  if (epoch != cached_epoch_) {
    permutation_.resize(num_samples_);
    std::iota(permutation_.begin(), permutation_.end(), 0);
    std::mt19937_64 rng(seed_ * 1000003ULL + static_cast<uint64_t>(epoch));
    // Fisher-Yates with our own index draw: std::shuffle's algorithm is unspecified.
    for (int64_t i = num_samples_ - 1; i > 0; --i) {
      const int64_t j = static_cast<int64_t>(rng() % static_cast<uint64_t>(i + 1));
      std::swap(permutation_[i], permutation_[j]);
    }
    cached_epoch_ = epoch;
  }
  return permutation_[index];
}

}  // namespace ps::data
