// Vocabulary: the ids of a tokenizer, its model vocabulary plus its added tokens, and the
// lookups between ids and token strings that every Tokenizer answers the same way.
// VocabularyTokenizer is the base of ByteLevelBpe and WordPiece: it owns their Vocabulary
// and implements Tokenizer's vocabulary methods from it. Built once at load, then
// immutable: any number of threads may read it at once.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/added_tokens.h"
#include "tokenizer/flat_maps.h"
#include "tokenizer/tokenizer.h"

namespace ps::tokenizer {

class Vocabulary {
 public:
  // The string an added token's id gives back (IdToToken, Decode); by default its content.
  using AddedTokenText = std::function<std::string(const AddedToken&)>;

  // `model_vocab` first, then `added_tokens` (a later entry of an id or a string replaces
  // an earlier one). TORCH_CHECKs that no id is negative, naming source_files.at(0).
  Vocabulary(const std::vector<std::pair<std::string, int32_t>>& model_vocab,
             const std::vector<AddedToken>& added_tokens, std::vector<std::string> source_files,
             const AddedTokenText& added_token_text = nullptr);

  // Number of ids (max id + 1); ids in between that no token has are unknown.
  int64_t vocab_size() const { return static_cast<int64_t>(id_to_token_.size()); }
  bool Has(int32_t id) const { return id >= 0 && id < vocab_size() && known_[id]; }
  // TORCH_CHECKs Has(id), naming the first source file.
  void CheckId(int32_t id) const {
    if (!Has(id)) FailUnknownId(id);
  }

  // Any token, added ones included.
  std::optional<int32_t> TokenToId(std::string_view token) const {
    const int32_t id = token_to_id_.Find(token);
    return id < 0 ? std::nullopt : std::optional<int32_t>(id);
  }
  // The model vocabulary only (no added tokens): what the model's algorithm looks up.
  const StringIdMap& model_tokens() const { return model_tokens_; }

  // The token of a known id (unchecked: call CheckId first where the id is input).
  const std::string& token(int32_t id) const { return id_to_token_[id]; }
  const std::vector<std::string>& source_files() const { return source_files_; }

 private:
  [[noreturn]] void FailUnknownId(int32_t id) const;

  std::vector<std::string> id_to_token_;  // [vocab_size]
  std::vector<uint8_t> known_;            // [vocab_size] 1 where an id has a token
  StringIdMap token_to_id_;               // model vocabulary, then added tokens
  StringIdMap model_tokens_;              // model vocabulary only
  std::vector<std::string> source_files_;
};

// A Tokenizer whose vocabulary methods are those of the Vocabulary it holds.
class VocabularyTokenizer : public Tokenizer {
 public:
  int64_t vocab_size() const final { return vocabulary_.vocab_size(); }
  std::optional<int32_t> TokenToId(std::string_view token) const final { return vocabulary_.TokenToId(token); }
  std::string IdToToken(int32_t id) const final {
    vocabulary_.CheckId(id);
    return vocabulary_.token(id);
  }
  std::vector<std::string> source_files() const final { return vocabulary_.source_files(); }

 protected:
  explicit VocabularyTokenizer(Vocabulary vocabulary) : vocabulary_(std::move(vocabulary)) {}
  const Vocabulary& vocabulary() const { return vocabulary_; }

 private:
  Vocabulary vocabulary_;
};

}  // namespace ps::tokenizer
