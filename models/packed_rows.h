// Packed rows (data.packing): several whole examples in one row of a batch, each seen by
// the model as if it were alone: its positions restart at 0 and its tokens attend only
// to earlier tokens of the same example. A batch says so with two [B, T] int64 tensors
// (models::Batch::position_ids, segment_ids); GPT and Llama turn them, once per
// micro-batch, into what their blocks read (PackedRows). Undefined tensors mean an
// ordinary row: positions 0..T-1, causal attention over the whole row, and then no mask
// is built at all (the models' unpacked path is unchanged, bit for bit) unless the row
// is longer than a sliding window (Mistral), whose band mask is built here once per
// micro-batch rather than in every block.
// Pure functions; any thread.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace ps::models {

// A batch's packing, as the data gives it.
struct Packing {
  at::Tensor position_ids;  // [B, T] int64, or undefined: 0..T-1 in every row
  at::Tensor segment_ids;   // [B, T] int64 (equal ids = one example), or undefined: one sequence per row
  bool empty() const { return !position_ids.defined() && !segment_ids.defined(); }
};

// What the blocks read.
struct PackedRows {
  at::Tensor position_ids;  // [B, T] int64, or undefined: 0..T-1
  // [B, 1, T, T] ([1, 1, T, T] for the window's band alone) bool, true = the query
  // (dim 2) may see the key (dim 3); undefined: causal.
  at::Tensor attn_mask;
};

// The mask of `packing.segment_ids` and the sliding window: query i sees key j when
// j <= i, both have the same segment id (packed rows), and, with `sliding_window` > 0,
// i - window < j (Mistral's window within each example). Every query sees itself, so no
// row of the mask is empty (no NaN from the softmax, padding included when it is a
// segment of its own). Without segment ids the mask exists only when T > window (the
// window's band, shared by the rows). On idx's device. Checks the shapes against `idx`
// [B, T].
PackedRows MakePackedRows(const Packing& packing, const at::Tensor& idx, int64_t sliding_window);

}  // namespace ps::models
