// Sequence-classification data (data.format: classification): labelled text from a
// .jsonl file (one object per line: "text", optional "text_pair", integer "label") or a
// .tsv file (text [TAB text_pair] TAB label per line; a first line whose last column is
// not an integer is a header), encoded once at start by the run's tokenizer (or as
// bytes), and assembled into BERT batches: `[CLS] a [SEP]` or `[CLS] a [SEP] b [SEP]`,
// truncated longest-first to data.seq_len, padded with [PAD] (attention mask 0), segment
// ids 0 for a and 1 for b.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "data/mlm_masking.h"  // MlmSpecialIds
#include "models/batch.h"

namespace ps::trainer {

struct ClassificationExample {
  std::vector<int64_t> a, b;  // token ids without special tokens; b empty: a single text
  int64_t label = 0;
};

struct ClassificationSet {
  std::string path;
  std::vector<ClassificationExample> examples;
  int64_t num_tokens = 0;  // of all texts, before truncation
};

using TextEncoder = std::function<std::vector<int64_t>(const std::string&)>;

// Throws data::DataError naming path:line for a line that does not parse, a missing
// text or label, a label outside [0, num_labels), or a file with no example.
ClassificationSet ReadClassificationSet(const std::string& path, int64_t num_labels, const TextEncoder& encode);

// The batch of examples `indices` (labels [B]).
models::Batch MakeClassificationBatch(const ClassificationSet& set, const std::vector<int64_t>& indices,
                                      int64_t seq_len, const data::MlmSpecialIds& ids);

}  // namespace ps::trainer
