// BERT masked-LM batches from token windows: each window of seq_len - 2 tokens becomes
// `[CLS] tokens [SEP]` (segment A; the stream's own separators stay, RoBERTa-style
// packing of whole documents), and dynamic masking picks what the model must predict.
//
// Masking (BERT's recipe): each position that is not [CLS], [SEP] or [PAD] is chosen
// with probability mask_ratio (0.15); a chosen token becomes [MASK] (80%), a random
// token (10%) or stays (10%); labels hold the original id at chosen positions and -100
// elsewhere. Every draw is a hash of (seed, global sample index, position), so a
// sample is masked the same way wherever and whenever it is drawn: a resumed run
// (which restores the sampler's consumed-sample count) needs no RNG state, and any
// rank count masks the same sample identically. Pure functions; thread-compatible.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace ps::data {

struct MlmSpecialIds {
  int64_t cls = -1, sep = -1, mask = -1, pad = -1;
};

struct MlmOptions {
  double mask_ratio = 0.15;          // share of maskable positions chosen
  double replace_with_mask = 0.8;    // of the chosen: [MASK]
  double replace_with_random = 0.1;  // of the chosen: a uniform random id (the rest stay)
};

struct BertBatch {
  at::Tensor input_ids;       // [B, T] int64, masked
  at::Tensor token_type_ids;  // [B, T] int64 (zeros: one segment)
  at::Tensor attention_mask;  // [B, T] int64 (ones: packed windows have no padding)
  at::Tensor labels;          // [B, T] int64: original ids where chosen, else -100
};

// `windows`: [B, W] int64 token windows (W >= seq_len - 2; extra tokens are ignored),
// row i being global sample `first_sample + i`. Returns sequences of `seq_len` tokens.
// Throws c10::Error when an id is missing (cls/sep/mask negative) or seq_len < 3.
BertBatch MakeMlmBatch(const at::Tensor& windows, int64_t seq_len, int64_t first_sample, uint64_t seed,
                       int64_t vocab_size, const MlmSpecialIds& ids, const MlmOptions& options = {});

// Applies dynamic masking to `input_ids` [B, T] in place (rows are samples
// first_sample + i) and returns the labels. Exposed for tests and other batch layouts.
at::Tensor ApplyMlmMasking(at::Tensor& input_ids, int64_t first_sample, uint64_t seed, int64_t vocab_size,
                           const MlmSpecialIds& ids, const MlmOptions& options = {});

}  // namespace ps::data
