#include "data/mlm_masking.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/zeros.h>
#include <c10/util/Exception.h>

namespace ps::data {
namespace {

uint64_t Mix(uint64_t x) {  // SplitMix64 finaliser
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Uniform in [0, 1) from 53 bits of a hash.
double Unit(uint64_t h) { return static_cast<double>(h >> 11) * (1.0 / 9007199254740992.0); }

void CheckIds(const MlmSpecialIds& ids, int64_t vocab_size) {
  TORCH_CHECK(ids.cls >= 0 && ids.cls < vocab_size, "MLM: the [CLS] id ", ids.cls, " is not in the vocabulary");
  TORCH_CHECK(ids.sep >= 0 && ids.sep < vocab_size, "MLM: the [SEP] id ", ids.sep, " is not in the vocabulary");
  TORCH_CHECK(ids.mask >= 0 && ids.mask < vocab_size, "MLM: the [MASK] id ", ids.mask, " is not in the vocabulary");
}

}  // namespace

at::Tensor ApplyMlmMasking(at::Tensor& input_ids, int64_t first_sample, uint64_t seed, int64_t vocab_size,
                           const MlmSpecialIds& ids, const MlmOptions& options) {
  CheckIds(ids, vocab_size);
  TORCH_CHECK(input_ids.dim() == 2 && input_ids.scalar_type() == at::kLong && input_ids.is_contiguous() &&
                  input_ids.device().is_cpu(),
              "MLM: input_ids must be a contiguous CPU int64 [batch, seq], got ", input_ids.sizes());
  const int64_t rows = input_ids.size(0), cols = input_ids.size(1);
  at::Tensor labels = at::full({rows, cols}, -100, input_ids.options());
  int64_t* x = input_ids.data_ptr<int64_t>();
  int64_t* y = labels.data_ptr<int64_t>();
  const double keep_ratio = 1.0 - options.replace_with_mask - options.replace_with_random;
  TORCH_CHECK(keep_ratio >= -1e-12, "MLM: replace_with_mask + replace_with_random exceed 1");
  for (int64_t r = 0; r < rows; ++r) {
    const uint64_t sample_key = Mix(seed ^ Mix(static_cast<uint64_t>(first_sample + r)));
    for (int64_t c = 0; c < cols; ++c) {
      int64_t& id = x[r * cols + c];
      if (id == ids.cls || id == ids.sep || id == ids.pad) continue;
      const uint64_t h = Mix(sample_key + static_cast<uint64_t>(c));
      if (Unit(h) >= options.mask_ratio) continue;
      y[r * cols + c] = id;
      const double how = Unit(Mix(h ^ 0x5bd1e995ULL));
      if (how < options.replace_with_mask) {
        id = ids.mask;
      } else if (how < options.replace_with_mask + options.replace_with_random) {
        id = static_cast<int64_t>(Mix(h ^ 0x27d4eb2fULL) % static_cast<uint64_t>(vocab_size));
      }
    }
  }
  return labels;
}

BertBatch MakeMlmBatch(const at::Tensor& windows, int64_t seq_len, int64_t first_sample, uint64_t seed,
                       int64_t vocab_size, const MlmSpecialIds& ids, const MlmOptions& options) {
  CheckIds(ids, vocab_size);
  TORCH_CHECK(seq_len >= 3, "MLM: data.seq_len must be >= 3 ([CLS], a token, [SEP]), got ", seq_len);
  TORCH_CHECK(windows.dim() == 2 && windows.size(1) >= seq_len - 2, "MLM: windows [", windows.sizes(),
              "] are shorter than data.seq_len - 2 = ", seq_len - 2);
  const int64_t rows = windows.size(0);
  BertBatch b;
  b.input_ids = at::empty({rows, seq_len}, at::kLong);
  b.input_ids.select(1, 0).fill_(ids.cls);
  b.input_ids.narrow(1, 1, seq_len - 2).copy_(windows.narrow(1, 0, seq_len - 2));
  b.input_ids.select(1, seq_len - 1).fill_(ids.sep);
  b.token_type_ids = at::zeros({rows, seq_len}, at::kLong);
  b.attention_mask = at::ones({rows, seq_len}, at::kLong);
  b.labels = ApplyMlmMasking(b.input_ids, first_sample, seed, vocab_size, ids, options);
  return b;
}

}  // namespace ps::data
