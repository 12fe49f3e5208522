// TokenSource: random access to a read-only stream of token ids, plus the factory
// that opens one from a DataConfig. File sources are memory-mapped and validated on
// open (a non-empty regular file, header, size, every id < vocab); a bad file is a
// DataError (data/data_error.h) naming it. Thread-compatible: const methods may be
// called concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/data_config.h"

namespace ps::data {

class TokenSource {
 public:
  virtual ~TokenSource() = default;
  virtual int64_t num_tokens() const = 0;
  // Copies tokens [begin, begin + count) into `out`; the range must be in bounds.
  virtual void Read(int64_t begin, int64_t count, int64_t* out) const = 0;
  // Where the tokens come from (file path or "synthetic(seed=...)"), for messages.
  virtual std::string description() const = 0;
};

// Opens `path` in `format` and checks every token id against `vocab_size`.
// For kSynthetic `path` is ignored and `seed` picks the stream; kAuto infers the format
// from `path` (InferDataFormat; an empty path is then an error). `path_key`, the config
// key the path came from ("data.train_path", "data.valid_path"), is named in the
// errors about the path itself (missing, a directory, empty); "" names none.
std::unique_ptr<TokenSource> OpenTokenSource(DataFormat format, const std::string& path,
                                             int64_t vocab_size, uint64_t seed,
                                             int64_t synthetic_tokens,
                                             const std::string& path_key = "");

// A Megatron dataset (<prefix>.bin + <prefix>.idx; `path` the prefix or either file),
// opened and validated as OpenTokenSource does, with where each document starts
// (MegatronDocumentStarts). Looks at no .mask: the caller decides what one beside means.
struct MegatronDataset {
  std::unique_ptr<TokenSource> tokens;
  std::vector<int64_t> document_starts;  // [documents + 1] token offsets, ascending
};
MegatronDataset OpenMegatronDataset(const std::string& path, int64_t vocab_size, const std::string& path_key = "");

// llm.c shard constants (dev/data/data_common.py).
constexpr int32_t kLlmcMagicGpt2 = 20240520;   // version 1, uint16 tokens
constexpr int32_t kLlmcMagicLlama3 = 20240801; // version 7, uint32 tokens
constexpr int64_t kLlmcHeaderBytes = 256 * 4;

}  // namespace ps::data
