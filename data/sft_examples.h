// SftExamples: the chat / instruction examples of supervised fine-tuning (data.format
// sft), as `ps_prep --format sft` writes them: a Megatron dataset (<prefix>.bin/.idx)
// whose documents are the examples, and beside it <prefix>.mask, one byte per token of
// the .bin, 1 when the token is a training target (docs/data.md, "The mask file").
// Mapped read-only and validated when opened; immutable afterwards, so const methods
// may be called from any thread. The batches are cut by SftBatcher (sft_batcher.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/mapped_file.h"
#include "data/token_source.h"

namespace ps::data {

class SftExamples {
 public:
  SftExamples(MegatronDataset dataset, std::unique_ptr<MappedFile> mask, std::string prefix);

  int64_t num_examples() const { return static_cast<int64_t>(starts_.size()) - 1; }
  int64_t num_tokens() const { return tokens_->num_tokens(); }
  int64_t length(int64_t example) const { return starts_[example + 1] - starts_[example]; }  // tokens
  // Copies the first `count` (<= length(example)) tokens of `example` into `ids` and
  // their mask bytes (0 or 1) into `mask`.
  void Read(int64_t example, int64_t count, int64_t* ids, uint8_t* mask) const;
  // The dataset's prefix, for messages and the log.
  const std::string& description() const { return prefix_; }

 private:
  std::unique_ptr<TokenSource> tokens_;
  std::vector<int64_t> starts_;  // [num_examples + 1] token offsets
  std::unique_ptr<MappedFile> mask_;
  std::string prefix_;
};

// Opens <prefix>.bin/.idx/.mask (`path`: the prefix or the .bin or .idx; `path_key`, e.g.
// "data.train_path", is named in the errors). DataError naming the file when the .mask is
// missing, its size is not the .bin's token count, or a byte of it is neither 0 nor 1,
// besides OpenTokenSource's checks of the Megatron pair (ids < vocab_size included).
std::unique_ptr<SftExamples> OpenSftExamples(const std::string& path, int64_t vocab_size,
                                             const std::string& path_key = "");

}  // namespace ps::data
