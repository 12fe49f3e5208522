// BPE as HF `tokenizers` runs a tokenizer.json of model "BPE": the text is split on
// added tokens, each other piece normalised (normalizer.h), pre-tokenised
// (pre_tokenizer.h), then either byte-level (GPT-2, Llama 3, Qwen, SmolLM2: a ByteLevel
// pre-tokenizer maps each byte to a printable character, by default after the GPT-2
// pattern) or character-level (SentencePiece-style: Llama 2, Mistral, TinyLlama; a
// character missing from the vocabulary falls back to its `<0xNN>` byte tokens), and
// merged by rank. Decoding runs decoder.h's steps. The config is what the loader read;
// the tokenizer built from it is immutable.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/added_tokens.h"
#include "tokenizer/decoder.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace ps::tokenizer {

struct ByteLevelBpeConfig {
  // Model vocabulary: token (byte-level characters, "Ġthe") and id.
  std::vector<std::pair<std::string, int32_t>> vocab;
  // Merges, highest priority (rank 0) first.
  std::vector<std::pair<std::string, std::string>> merges;
  std::vector<AddedToken> added_tokens;
  // Normalizer steps, run on each piece between added tokens.
  std::vector<NormalizerStep> normalizer;
  // Pre-tokenizer steps before ByteLevel (or all of them when byte_level is false).
  std::vector<PreTokenizerStep> pre_tokenizer;
  // A ByteLevel pre-tokenizer ends the list: the model works on bytes (else on characters).
  bool byte_level = true;
  // ByteLevel pre-tokenizer: prepend ' ' to each text piece not starting with one.
  bool add_prefix_space = false;
  // ByteLevel pre-tokenizer: split by the GPT-2 pattern (else a piece is one word).
  bool use_regex = true;
  // Model "ignore_merges": a word found whole in the vocabulary is one token.
  bool ignore_merges = false;
  // Model "byte_fallback" (character-level only): a character missing from the
  // vocabulary becomes its bytes' `<0xNN>` tokens when all exist.
  bool byte_fallback = false;
  // Model "unk_token" for characters missing from the vocabulary (else they are dropped,
  // as HF does); "fuse_unk" merges consecutive unknowns.
  std::optional<std::string> unk_token;
  bool fuse_unk = false;
  // Decoder steps; none: tokens joined by ' '.
  std::vector<DecoderStep> decoder;
  // Post-processor (HF's add_special_tokens=True): ids before and after the text.
  std::vector<int32_t> prefix_ids;
  std::vector<int32_t> suffix_ids;
  // The end-of-text token (tokenizer_config.json's eos_token), if known.
  std::optional<std::string> eos_token;
  // For error messages and source_files().
  std::vector<std::string> source_files;
};

// TORCH_CHECKs the config (merges of unknown tokens, ids) naming source_files[0].
std::unique_ptr<Tokenizer> MakeByteLevelBpe(ByteLevelBpeConfig config);

}  // namespace ps::tokenizer
