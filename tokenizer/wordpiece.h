// WordPiece as BERT and HF `tokenizers` use it: BertNormalizer (clean text, spaces around
// CJK ideographs, strip accents, lowercase), BertPreTokenizer (split on whitespace and
// around punctuation), greedy longest-match-first with "##" continuations, and the
// WordPiece decoder. The config is what the loader read; the tokenizer is immutable.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/added_tokens.h"
#include "tokenizer/tokenizer.h"

namespace ps::tokenizer {

// HF's BertNormalizer options (tokenizer.json "normalizer"); `enabled` false = none.
struct BertNormalizerConfig {
  bool enabled = true;
  bool clean_text = true;             // drop control characters, map whitespace to ' '
  bool handle_chinese_chars = true;   // ' ' around CJK ideographs
  std::optional<bool> strip_accents;  // NFD + drop Mn; unset: follows `lowercase`
  bool lowercase = true;
};

struct WordPieceConfig {
  std::vector<std::pair<std::string, int32_t>> vocab;
  std::vector<AddedToken> added_tokens;
  BertNormalizerConfig normalizer;
  std::string unk_token = "[UNK]";
  std::string continuing_subword_prefix = "##";
  int64_t max_input_chars_per_word = 100;  // longer words become unk_token
  // Decoder: WordPiece (glue continuations, clean up spaces) or none (join with ' ').
  bool wordpiece_decoder = true;
  bool decoder_cleanup = true;
  std::string decoder_prefix = "##";
  std::vector<std::string> source_files;
};

// TORCH_CHECKs the config (unk_token present, ids) naming source_files[0].
std::unique_ptr<Tokenizer> MakeWordPiece(WordPieceConfig config);

// HF's BertNormalizer on valid UTF-8 (exposed for tests).
std::string BertNormalize(const BertNormalizerConfig& config, std::string_view text);

}  // namespace ps::tokenizer
