// Added (special) tokens kept whole in the text, as HF's AddedVocabulary does: the text is
// split on them first, leftmost-longest, before normalisation and pre-tokenisation.
// Tokens with normalized=false match the raw text; those with normalized=true match the
// normalised text (their content normalised the same way). Immutable; any thread.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ps::tokenizer {

// One entry of tokenizer.json's "added_tokens" (HF's flags, same meaning and defaults).
struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool single_word = false;  // match only when not inside a word (\w on neither side)
  bool lstrip = false;       // the match takes the whitespace on its left
  bool rstrip = false;       // the match takes the whitespace on its right
  bool normalized = true;    // match the normalised text instead of the raw text
  bool special = false;      // a control token (only HF's skip_special_tokens uses it)
};

// A piece of split text: an added token's id, or text (id == -1) for the next stages.
struct TextSegment {
  std::string_view text;
  int32_t id;
};

class AddedTokenSplitter {
 public:
  AddedTokenSplitter() = default;
  // `tokens`: the patterns to find; their `content` is matched literally.
  explicit AddedTokenSplitter(std::vector<AddedToken> tokens);

  bool empty() const { return tokens_.empty(); }

  // Appends the segments of `text`, which cover it in order (no empty text segments).
  void Split(std::string_view text, std::vector<TextSegment>* out) const;

 private:
  std::vector<AddedToken> tokens_;
  // Whether any token starts with a byte; the only such byte when there is one (for
  // memchr), else -1.
  std::array<bool, 256> is_first_byte_{};
  int first_byte_ = -1;
  // Indices into tokens_ of the tokens starting with each byte, longest first.
  std::array<std::vector<int32_t>, 256> by_first_byte_;
};

}  // namespace ps::tokenizer
