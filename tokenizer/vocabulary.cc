#include "tokenizer/vocabulary.h"

#include <c10/util/Exception.h>

#include <algorithm>

namespace ps::tokenizer {

Vocabulary::Vocabulary(const std::vector<std::pair<std::string, int32_t>>& model_vocab,
                       const std::vector<AddedToken>& added_tokens, std::vector<std::string> source_files,
                       const AddedTokenText& added_token_text)
    : source_files_(std::move(source_files)) {
  const std::string& file = source_files_.at(0);
  int32_t max_id = -1;
  for (const auto& [token, id] : model_vocab) {
    TORCH_CHECK(id >= 0, file, ": negative id ", id, " of token '", token, "'");
    max_id = std::max(max_id, id);
  }
  for (const auto& t : added_tokens) {
    TORCH_CHECK(t.id >= 0, file, ": added token '", t.content, "' has a negative id");
    max_id = std::max(max_id, t.id);
  }
  id_to_token_.resize(max_id + 1);
  known_.assign(max_id + 1, 0);
  for (const auto& [token, id] : model_vocab) {
    id_to_token_[id] = token;
    known_[id] = 1;
    token_to_id_.Insert(token, id);
    model_tokens_.Insert(token, id);
  }
  for (const auto& t : added_tokens) {
    id_to_token_[t.id] = added_token_text ? added_token_text(t) : t.content;
    known_[t.id] = 1;
    token_to_id_.Insert(t.content, t.id);
  }
}

void Vocabulary::FailUnknownId(int32_t id) const {
  TORCH_CHECK(false, "tokenizer: id ", id, " is not in the vocabulary of ", source_files_.at(0), " (",
              vocab_size(), " ids)");
  __builtin_unreachable();
}

}  // namespace ps::tokenizer
