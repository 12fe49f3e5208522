// SftBatcher: micro-batches of chat examples (data.format sft, sft_examples.h) for
// next-token training; BatchSampler's counterpart for examples.
//
// A row has seq_len input slots. An example of n tokens takes k = min(n - 1, seq_len)
// of them, as a token window of seq_len + 1 does: inputs are its tokens 0..k-1, the
// targets its tokens 1..k (an example over seq_len + 1 tokens is truncated). labels[t]
// is the target token when its mask byte is 1, else -100; no target ever lies in another
// example. Slots after the last example are padding: input id 0, label -100, attention
// mask 0.
//
// Without packing a sample is an example, one per row from the row's start. With
// packing the examples are packed once, greedily in file order (an example joins the
// current row when its slots fit the room left, else it starts the next one), and a
// sample is a packed row; rows then carry position_ids restarting at 0 for each example
// and segment_ids 0, 1, ... per example, the padding a segment of its own.
//
// Samples are visited in SampleOrder (permuted per epoch by `seed` when shuffling) and
// sharded by rank as BatchSampler does: one Next(B) on every rank consumes B * world
// samples, rank r taking [consumed + r*B, consumed + (r+1)*B). The whole state is
// consumed_samples, so resuming is exact. One object belongs to one thread.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "data/sample_order.h"
#include "data/sft_examples.h"

namespace ps::data {

struct SftBatch {
  at::Tensor input_ids;       // [B, T] int64; padding 0
  at::Tensor labels;          // [B, T] int64; the next token where it is a target, else -100
  at::Tensor attention_mask;  // [B, T] int64; 1 = a token of an example, 0 = padding
  at::Tensor position_ids;    // [B, T] int64 with packing (0.. per example), else undefined (0..T-1)
  at::Tensor segment_ids;     // [B, T] int64 with packing (example index in the row), else undefined
};

// What batches hold: input slots and targets.
struct SlotCounts {
  int64_t token_slots = 0;    // slots holding a token of an example (attention mask 1)
  int64_t total_slots = 0;    // all slots: rows x seq_len
  int64_t target_tokens = 0;  // labels != -100: what the loss averages over
  // Packing efficiency: token_slots / total_slots (the share of non-padding slots; 1 for
  // token windows); NaN while total_slots is 0.
  double packing_efficiency() const;
};

class SftBatcher {
 public:
  // Throws DataError naming the data when no example has a target slot (every example
  // shorter than 2 tokens).
  SftBatcher(const SftExamples& examples, int64_t seq_len, bool packing, bool shuffle, uint64_t seed, int rank = 0,
             int world_size = 1);

  // Next micro-batch of this rank, on the host.
  SftBatch Next(int64_t micro_batch);

  int64_t consumed_samples() const { return consumed_samples_; }
  void set_consumed_samples(int64_t n) { consumed_samples_ = n; }
  int64_t samples_per_epoch() const { return order_->num_samples(); }
  // The slots of every batch Next() returned since construction (set_consumed_samples
  // neither resets nor restores them: after a resume they count this process's batches).
  const SlotCounts& handed_out() const { return handed_out_; }
  // The slots of one epoch's samples (every row once): the packing efficiency the data
  // allows at this seq_len, known before training.
  const SlotCounts& epoch() const { return epoch_; }

 private:
  // Writes example `e` into row slots [offset, offset + its slots) of the flat [B, T]
  // buffers at `row`; returns the slots it took.
  int64_t Place(int64_t e, int64_t row, int64_t offset, int64_t segment, int64_t* ids, int64_t* labels,
                int64_t* attn, int64_t* pos, int64_t* seg) const;
  int64_t SlotsOf(int64_t e) const;

  const SftExamples& examples_;
  int64_t seq_len_;
  bool packing_;
  int rank_;
  int world_size_;
  std::vector<int64_t> row_first_;  // packing: [rows + 1], row r = examples [row_first_[r], row_first_[r + 1])
  std::unique_ptr<SampleOrder> order_;
  int64_t consumed_samples_ = 0;
  SlotCounts handed_out_, epoch_;
  mutable std::vector<int64_t> ids_buf_;  // one example's tokens, [seq_len + 1]
  mutable std::vector<uint8_t> mask_buf_;
};

}  // namespace ps::data
