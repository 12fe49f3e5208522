// Batch: one micro-batch as every model reads it (GPT and Llama next-token prediction,
// BERT masked LM and classification); fields a model does not use stay undefined. And
// CountedTargets, what a batch's loss averages over. Tensors only: no model code.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>

namespace ps::models {

struct Batch {
  at::Tensor input_ids;       // [B, T] int64
  // GPT/Llama: next tokens [B, T], -100 where nothing is predicted (chat data: prompts,
  // padding); BERT MLM: original ids at masked positions, -100 elsewhere [B, T];
  // classification: labels [B].
  at::Tensor labels;
  at::Tensor token_type_ids;  // [B, T] int64 or undefined (one segment)
  // [B, T] 1 = token, 0 = padding, or undefined (no padding). BERT reads it; GPT and
  // Llama do not need it: their padding is at the end of a row (or of its own segment
  // when packed), behind causal attention, with labels -100.
  at::Tensor attention_mask;
  // Packed rows (data.packing; packed_rows.h), GPT and Llama only (BERT refuses them):
  at::Tensor position_ids;    // [B, T] int64 restarting per example, or undefined (0..T-1)
  at::Tensor segment_ids;     // [B, T] int64 example of each token (padding its own), or undefined (one per row)

  Batch To(at::Device device) const;  // undefined fields stay undefined
};

// The targets a next-token or MLM batch's loss averages over: labels other than -100
// (classification: every label). The trainer weights micro-batches by it so a global
// batch's loss is the mean over all of its counted targets. Reads labels (a host sync
// when they are on a device).
int64_t CountedTargets(const Batch& batch);

}  // namespace ps::models
