// Tokenizer: text <-> token ids, as HF `tokenizers` does for the families this project
// trains: byte-level BPE (GPT-2, Llama 3, Qwen2/3, SmolLM2), SentencePiece-style BPE
// (Llama 2, Mistral, TinyLlama) and WordPiece (BERT). An immutable object
// once loaded: every const method may be called from many threads at once (ps_prep
// encodes documents in parallel with one Tokenizer).
//
// Encode() runs normalisation, pre-tokenisation and the model, and keeps the special
// tokens written in the text whole (`<|endoftext|>`, `[SEP]`, ...), as HF's
// `encode(text, add_special_tokens=False)`; it adds none of its own.
// EncodeWithSpecialTokens() adds those of a BPE tokenizer.json's TemplateProcessing
// post-processor (Llama 3's BOS), or of tokenizer_config.json's add_bos_token /
// add_eos_token where its tokenizer_class is LlamaTokenizer(Fast), as transformers 4's
// `encode(text)` (WordPiece: none).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ps::tokenizer {

enum class TokenizerKind { kByteLevelBpe, kBpe, kWordPiece };
const char* ToString(TokenizerKind kind);

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  virtual TokenizerKind kind() const = 0;

  // Ids of `text` (UTF-8). Invalid UTF-8 is an error (c10::Error) naming the byte offset.
  virtual std::vector<int32_t> Encode(std::string_view text) const = 0;
  // Encode() within the post-processor's special tokens (BOS, EOS).
  virtual std::vector<int32_t> EncodeWithSpecialTokens(std::string_view text) const { return Encode(text); }

  // Text of `ids` as HF's `decode(ids, skip_special_tokens=False)` gives it (BPE: the
  // bytes joined back, invalid UTF-8 sequences replaced by U+FFFD; WordPiece: tokens
  // joined by spaces, "##" continuations glued, HF's clean-up of spaces before
  // punctuation). An id outside the vocabulary is an error naming it.
  virtual std::string Decode(const std::vector<int32_t>& ids) const = 0;

  // Number of ids, special/added tokens included (max id + 1).
  virtual int64_t vocab_size() const = 0;

  virtual std::optional<int32_t> TokenToId(std::string_view token) const = 0;
  // The token string of an id as stored in the vocabulary ("Ġthe", "##ing").
  virtual std::string IdToToken(int32_t id) const = 0;

  // The token that separates documents in a token stream: tokenizer_config.json's
  // eos_token when it names one, else `<|endoftext|>`, `<|end_of_text|>` or `</s>` (BPE),
  // `[SEP]` (BERT); nullopt when the vocabulary has none.
  virtual std::optional<int32_t> end_of_text_id() const = 0;

  // The files it was read from (tokenizer.json, or vocab.json + merges.txt, or vocab.txt,
  // plus tokenizer_config.json / special_tokens_map.json when present next to them):
  // what an exported HF folder copies.
  virtual std::vector<std::string> source_files() const = 0;
};

// Loads a tokenizer from `path`: an HF tokenizer.json (model type BPE with the pipeline
// components of docs/tokenizers.md, or WordPiece), a vocab.json / merges.txt / vocab.txt file, or a folder
// holding them (tokenizer.json preferred). Errors name the file and what is wrong.
std::unique_ptr<Tokenizer> LoadTokenizer(const std::string& path);

}  // namespace ps::tokenizer
