// BatchMaker: turns the sampler's token windows ([B, seq_len + 1], row i being global
// sample first_sample + i) into the batches of the run's model:
// - GPT: inputs are the first seq_len tokens, labels the next seq_len;
// - BERT masked LM: `[CLS] window [SEP]` with dynamic masking (data/mlm_masking.h),
//   hashed from the seed and the global sample index, so resume and rank count do not
//   change which positions are masked.
// The BERT special ids come from the run's tokenizer (data.tokenizer, or the
// model.init_from folder): its [CLS], [SEP], [MASK] and [PAD]. Byte-level text
// (data.format text or classification, no tokenizer) uses 256-259 for [PAD], [CLS],
// [SEP], [MASK];
// synthetic data uses the top four ids of the vocabulary.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "data/mlm_masking.h"
#include "models/batch.h"
#include "trainer/config/config.h"

namespace ps::trainer {

// Throws ConfigError naming the tokenizer and the missing token, or data.tokenizer when
// a BERT run on pre-tokenized data has none.
data::MlmSpecialIds BertSpecialIds(const Config& config);

class BatchMaker {
 public:
  explicit BatchMaker(const Config& config);
  models::Batch Make(const at::Tensor& windows, int64_t first_sample) const;

 private:
  const Config& config_;
  data::MlmSpecialIds ids_;
};

}  // namespace ps::trainer
