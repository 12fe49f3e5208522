// BatchSampler: cuts a TokenSource into samples of seq_len + 1 tokens (stride seq_len),
// permutes them per epoch (SampleOrder: seeded by seed and epoch), and shards them by rank.
//
// The global sample stream is 0, 1, 2, ...; one call of Next(B) on every rank consumes
// B * world samples, rank r taking [consumed + r*B, consumed + (r+1)*B). The whole
// state is `consumed_samples`, so resuming is exact: set it and continue.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>

#include "data/sample_order.h"
#include "data/token_source.h"

namespace ps::data {

class BatchSampler {
 public:
  // Throws DataError naming the source when it holds fewer than seq_len + 1 tokens.
  BatchSampler(const TokenSource& source, int64_t seq_len, bool shuffle, uint64_t seed,
               int rank = 0, int world_size = 1);

  // Next micro-batch of this rank: int64 tensor [micro_batch, seq_len + 1].
  at::Tensor Next(int64_t micro_batch);

  int64_t consumed_samples() const { return consumed_samples_; }
  void set_consumed_samples(int64_t n) { consumed_samples_ = n; }
  int64_t samples_per_epoch() const { return samples_per_epoch_; }

 private:
  const TokenSource& source_;
  int64_t seq_len_;
  int rank_;
  int world_size_;
  int64_t samples_per_epoch_;
  int64_t consumed_samples_ = 0;
  std::unique_ptr<SampleOrder> order_;
};

}  // namespace ps::data
