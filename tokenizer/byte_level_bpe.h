// Byte-level BPE as GPT-2 and HF `tokenizers` (model "BPE" with a ByteLevel
// pre-tokenizer): the text is split on added tokens, then by the GPT-2 pattern (or a
// Split regex), each piece's bytes mapped to printable characters and merged by rank.
// The config is what the loader read; the tokenizer built from it is immutable.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/added_tokens.h"
#include "tokenizer/tokenizer.h"

namespace ps::tokenizer {

struct ByteLevelBpeConfig {
  // Model vocabulary: token (byte-level characters, "Ġthe") and id.
  std::vector<std::pair<std::string, int32_t>> vocab;
  // Merges, highest priority (rank 0) first.
  std::vector<std::pair<std::string, std::string>> merges;
  std::vector<AddedToken> added_tokens;
  // ByteLevel pre-tokenizer: prepend ' ' to each text piece not starting with one.
  bool add_prefix_space = false;
  // ByteLevel pre-tokenizer: split by the GPT-2 pattern (else a piece is one word).
  bool use_regex = true;
  // A Split pre-tokenizer before ByteLevel (behavior Isolated): its regex, if any.
  std::optional<std::string> split_pattern;
  // Model "ignore_merges": a word found whole in the vocabulary is one token.
  bool ignore_merges = false;
  // Model "unk_token" for characters missing from the vocabulary (else they are dropped,
  // as HF does); "fuse_unk" merges consecutive unknowns.
  std::optional<std::string> unk_token;
  bool fuse_unk = false;
  // Decoder: ByteLevel (bytes joined, lossy UTF-8) or none (tokens joined by ' ').
  bool byte_level_decoder = true;
  // For error messages and source_files().
  std::vector<std::string> source_files;
};

// TORCH_CHECKs the config (merges of unknown tokens, ids) naming source_files[0].
std::unique_ptr<Tokenizer> MakeByteLevelBpe(ByteLevelBpeConfig config);

}  // namespace ps::tokenizer
