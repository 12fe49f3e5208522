#include "data/batch_sampler.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>


#include "data/data_error.h"

namespace ps::data {

BatchSampler::BatchSampler(const TokenSource& source, int64_t seq_len, bool shuffle, uint64_t seed,
                           int rank, int world_size)
    : source_(source),
      seq_len_(seq_len),
      rank_(rank),
      world_size_(world_size) {
  TORCH_CHECK(seq_len > 0, "data.seq_len must be > 0");
  TORCH_CHECK(rank >= 0 && rank < world_size, "rank ", rank, " not in [0, ", world_size, ")");
  samples_per_epoch_ = (source.num_tokens() - 1) / seq_len;
  // A source too short for one sample is a user error in the data (or data.seq_len).
  PS_DATA_CHECK(samples_per_epoch_ >= 1, source.description(), ": ", source.num_tokens(),
                " tokens is fewer than data.seq_len + 1 = ", seq_len + 1, " (one sample)");
  order_ = std::make_unique<SampleOrder>(samples_per_epoch_, shuffle, seed);
}

at::Tensor BatchSampler::Next(int64_t micro_batch) {
  auto out = at::empty({micro_batch, seq_len_ + 1}, at::TensorOptions().dtype(at::kLong));
  int64_t* p = out.data_ptr<int64_t>();
  const int64_t base = consumed_samples_ + static_cast<int64_t>(rank_) * micro_batch;
  for (int64_t i = 0; i < micro_batch; ++i) {
    const int64_t window = order_->IndexOf(base + i);
    source_.Read(window * seq_len_, seq_len_ + 1, p + i * (seq_len_ + 1));
  }
  consumed_samples_ += micro_batch * world_size_;
  return out;
}

}  // namespace ps::data
