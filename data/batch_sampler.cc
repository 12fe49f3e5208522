#include "data/batch_sampler.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <numeric>
#include <random>

#include "data/data_error.h"

namespace ps::data {

BatchSampler::BatchSampler(const TokenSource& source, int64_t seq_len, bool shuffle, uint64_t seed,
                           int rank, int world_size)
    : source_(source),
      seq_len_(seq_len),
      shuffle_(shuffle),
      seed_(seed),
      rank_(rank),
      world_size_(world_size) {
  TORCH_CHECK(seq_len > 0, "data.seq_len must be > 0");
  TORCH_CHECK(rank >= 0 && rank < world_size, "rank ", rank, " not in [0, ", world_size, ")");
  samples_per_epoch_ = (source.num_tokens() - 1) / seq_len;
  // A source too short for one sample is a user error in the data (or data.seq_len).
  PS_DATA_CHECK(samples_per_epoch_ >= 1, source.description(), ": ", source.num_tokens(),
                " tokens is fewer than data.seq_len + 1 = ", seq_len + 1, " (one sample)");
}

int64_t BatchSampler::WindowOf(int64_t global_sample) {
  const int64_t epoch = global_sample / samples_per_epoch_;
  const int64_t index = global_sample % samples_per_epoch_;
  if (!shuffle_) return index;
  if (epoch != cached_epoch_) {
    permutation_.resize(samples_per_epoch_);
    std::iota(permutation_.begin(), permutation_.end(), 0);
    std::mt19937_64 rng(seed_ * 1000003ULL + static_cast<uint64_t>(epoch));
    // Fisher-Yates with our own index draw: std::shuffle's algorithm is unspecified.
    for (int64_t i = samples_per_epoch_ - 1; i > 0; --i) {
      const int64_t j = static_cast<int64_t>(rng() % static_cast<uint64_t>(i + 1));
      std::swap(permutation_[i], permutation_[j]);
    }
    cached_epoch_ = epoch;
  }
  return permutation_[index];
}

at::Tensor BatchSampler::Next(int64_t micro_batch) {
  auto out = at::empty({micro_batch, seq_len_ + 1}, at::TensorOptions().dtype(at::kLong));
  int64_t* p = out.data_ptr<int64_t>();
  const int64_t base = consumed_samples_ + static_cast<int64_t>(rank_) * micro_batch;
  for (int64_t i = 0; i < micro_batch; ++i) {
    const int64_t window = WindowOf(base + i);
    source_.Read(window * seq_len_, seq_len_ + 1, p + i * (seq_len_ + 1));
  }
  consumed_samples_ += micro_batch * world_size_;
  return out;
}

}  // namespace ps::data
