#include "tokenizer/added_tokens.h"

#include <unicode/uchar.h>

#include <algorithm>
#include <cstring>

#include "tokenizer/utf8.h"

namespace ps::tokenizer {
namespace {

// Rust regex's \w (Unicode): alphabetic, marks, decimal numbers, connector punctuation,
// join controls.
bool IsWordChar(char32_t c) {
  if (c < 0x80) return (c | 0x20) - 'a' < 26u || c - '0' < 10u || c == '_';
  if (u_hasBinaryProperty(c, UCHAR_ALPHABETIC) || u_hasBinaryProperty(c, UCHAR_JOIN_CONTROL)) {
    return true;
  }
  const int8_t type = u_charType(c);
  return type == U_NON_SPACING_MARK || type == U_ENCLOSING_MARK || type == U_COMBINING_SPACING_MARK ||
         type == U_DECIMAL_DIGIT_NUMBER || type == U_CONNECTOR_PUNCTUATION;
}

bool IsSpace(char32_t c) { return u_isUWhiteSpace(c); }

// The code point that ends at `end` (> 0) of valid UTF-8, and its start in *start.
char32_t PrevCodePoint(std::string_view s, size_t end, size_t* start) {
  size_t p = end - 1;
  while ((static_cast<uint8_t>(s[p]) & 0xC0) == 0x80) --p;
  *start = p;
  size_t q = p;
  return NextCodePoint(s, &q);
}

}  // namespace

AddedTokenSplitter::AddedTokenSplitter(std::vector<AddedToken> tokens) {
  for (auto& t : tokens) {
    if (!t.content.empty()) tokens_.push_back(std::move(t));
  }
  for (size_t i = 0; i < tokens_.size(); ++i) {
    by_first_byte_[static_cast<uint8_t>(tokens_[i].content[0])].push_back(static_cast<int32_t>(i));
  }
  int distinct = 0;
  for (int b = 0; b < 256; ++b) {
    is_first_byte_[b] = !by_first_byte_[b].empty();
    if (is_first_byte_[b]) {
      ++distinct;
      first_byte_ = b;
    }
  }
  if (distinct != 1) first_byte_ = -1;
  for (auto& list : by_first_byte_) {
    std::stable_sort(list.begin(), list.end(), [&](int32_t a, int32_t b) {
      return tokens_[a].content.size() > tokens_[b].content.size();
    });
  }
}

void AddedTokenSplitter::Split(std::string_view text, std::vector<TextSegment>* out) const {
  if (tokens_.empty()) {
    if (!text.empty()) out->push_back({text, -1});
    return;
  }
  size_t done = 0;  // end of the last segment written
  size_t pos = 0;
  while (pos < text.size()) {
    // Skip to the next byte that starts a token.
    if (first_byte_ >= 0) {
      const void* hit = std::memchr(text.data() + pos, first_byte_, text.size() - pos);
      if (hit == nullptr) break;
      pos = static_cast<const char*>(hit) - text.data();
    } else {
      while (pos < text.size() && !is_first_byte_[static_cast<uint8_t>(text[pos])]) ++pos;
      if (pos == text.size()) break;
    }
    const auto& candidates = by_first_byte_[static_cast<uint8_t>(text[pos])];
    const AddedToken* match = nullptr;
    for (int32_t i : candidates) {
      const std::string& c = tokens_[i].content;
      if (text.compare(pos, c.size(), c) == 0) {
        match = &tokens_[i];
        break;
      }
    }
    if (match == nullptr) {
      ++pos;
      continue;
    }
    size_t start = pos;
    size_t stop = pos + match->content.size();
    if (match->single_word) {
      size_t unused;
      const bool word_before = start > 0 && IsWordChar(PrevCodePoint(text, start, &unused));
      size_t next = stop;
      const bool word_after = stop < text.size() && IsWordChar(NextCodePoint(text, &next));
      if (word_before || word_after) {
        pos = stop;  // as HF's non-overlapping search, the rejected match is skipped
        continue;
      }
    }
    if (match->lstrip) {
      size_t p = start;
      while (p > done) {
        size_t prev;
        if (!IsSpace(PrevCodePoint(text, p, &prev))) break;
        p = prev;
      }
      start = p;
    }
    if (match->rstrip) {
      while (stop < text.size()) {
        size_t next = stop;
        if (!IsSpace(NextCodePoint(text, &next))) break;
        stop = next;
      }
    }
    if (start > done) out->push_back({text.substr(done, start - done), -1});
    out->push_back({text.substr(start, stop - start), match->id});
    done = pos = stop;
  }
  if (done < text.size()) out->push_back({text.substr(done), -1});
}

}  // namespace ps::tokenizer
