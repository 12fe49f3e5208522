#include "tokenizer/pre_tokenizer.h"

#include <c10/util/Exception.h>
#include <unicode/uchar.h>

#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

namespace ps::tokenizer {
namespace {

struct Span {
  size_t start, end;
  bool is_match;
};

// HF's SplitDelimiterBehavior applied to the alternating gaps and matches of a text.
std::vector<Span> ApplyBehavior(const std::vector<Span>& spans, SplitBehavior behavior) {
  std::vector<Span> acc;
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::kIsolated:
      return spans;
    case SplitBehavior::kRemoved:
      for (const Span& s : spans) {
        if (!s.is_match) acc.push_back(s);
      }
      return acc;
    case SplitBehavior::kContiguous:
      for (const Span& s : spans) {
        if (s.is_match == previous_match && !acc.empty()) {
          acc.back().end = s.end;
        } else {
          acc.push_back(s);
        }
        previous_match = s.is_match;
      }
      return acc;
    case SplitBehavior::kMergedWithPrevious:
      for (const Span& s : spans) {
        if (s.is_match && !previous_match && !acc.empty()) {
          acc.back().end = s.end;
        } else {
          acc.push_back(s);
        }
        previous_match = s.is_match;
      }
      return acc;
    case SplitBehavior::kMergedWithNext:
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->is_match && !previous_match && !acc.empty()) {
          acc.back().start = it->start;
        } else {
          acc.push_back(*it);
        }
        previous_match = it->is_match;
      }
      return {acc.rbegin(), acc.rend()};
  }
  return acc;
}

// Every numeric code point (Rust's char::is_numeric: Nd, Nl, No) as a one-character match.
void FindDigits(std::string_view text, std::vector<std::pair<size_t, size_t>>* matches) {
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t start = pos;
    const char32_t c = NextCodePoint(text, &pos);
    const bool numeric = c < 0x80 ? (c >= '0' && c <= '9') : [&] {
      const int8_t type = u_charType(c);
      return type == U_DECIMAL_DIGIT_NUMBER || type == U_LETTER_NUMBER || type == U_OTHER_NUMBER;
    }();
    if (numeric) matches->emplace_back(start, pos);
  }
}

void FindLiteral(std::string_view text, const std::string& pattern,
                 std::vector<std::pair<size_t, size_t>>* matches) {
  if (pattern.empty()) return;
  for (size_t hit = text.find(pattern); hit != std::string_view::npos; hit = text.find(pattern, hit + pattern.size())) {
    matches->emplace_back(hit, hit + pattern.size());
  }
}

}  // namespace

void SplitByMatches(Piece text, const std::vector<std::pair<size_t, size_t>>& matches, SplitBehavior behavior,
                    bool invert, std::vector<Piece>* out) {
  std::vector<Span> spans;
  size_t prev = 0;
  for (const auto& [start, end] : matches) {
    if (start != prev) spans.push_back({prev, start, invert});
    spans.push_back({start, end, !invert});
    prev = end;
  }
  if (prev != text.text.size()) spans.push_back({prev, text.text.size(), invert});
  for (const Span& s : ApplyBehavior(spans, behavior)) {
    if (s.end == s.start) continue;
    out->push_back({text.text.substr(s.start, s.end - s.start), text.at_start && s.start == 0});
  }
}

PreTokenizer::PreTokenizer(std::vector<PreTokenizerStep> steps) : steps_(std::move(steps)) {
  for (const PreTokenizerStep& s : steps_) {
    regexes_.push_back(s.regex ? std::make_unique<RegexSplitter>(*s.regex) : nullptr);
    const bool isolated = s.kind == PreTokenizerStep::Kind::kSplit && s.regex &&
                          s.behavior == SplitBehavior::kIsolated && !s.invert;
    llama3_digits_.push_back(!isolated                    ? 0
                             : *s.regex == kLlama3Pattern ? 3
                             : *s.regex == kQwen2Pattern  ? 1
                                                          : 0);
  }
}
PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;
PreTokenizer::~PreTokenizer() = default;

void PreTokenizer::Run(std::vector<Piece>* pieces, std::list<std::string>* storage) const {
  std::vector<Piece> next;
  for (size_t step = 0; step < steps_.size(); ++step) {
    next.clear();
    for (const Piece& p : *pieces) RunStep(step, p, &next, storage);
    pieces->swap(next);
  }
}

void PreTokenizer::RunStep(size_t step, Piece piece, std::vector<Piece>* out,
                           std::list<std::string>* storage) const {
  const PreTokenizerStep& s = steps_[step];
  std::vector<std::pair<size_t, size_t>> matches;
  switch (s.kind) {
    case PreTokenizerStep::Kind::kSplit:
      if (llama3_digits_[step] > 0) {
        std::vector<std::string_view> views;
        SplitLlama3(piece.text, llama3_digits_[step], &views);
        for (size_t i = 0; i < views.size(); ++i) out->push_back({views[i], piece.at_start && i == 0});
        return;
      }
      if (regexes_[step]) {
        regexes_[step]->FindAll(piece.text, &matches);
      } else {
        FindLiteral(piece.text, s.text, &matches);
      }
      SplitByMatches(piece, matches, s.behavior, s.invert, out);
      return;
    case PreTokenizerStep::Kind::kDigits:
      FindDigits(piece.text, &matches);
      SplitByMatches(piece, matches,
                     s.individual_digits ? SplitBehavior::kIsolated : SplitBehavior::kContiguous, false, out);
      return;
    case PreTokenizerStep::Kind::kMetaspace: {
      std::string replaced;
      for (char c : piece.text) {
        if (c == ' ') {
          replaced += s.replacement;
        } else {
          replaced.push_back(c);
        }
      }
      const bool starts = replaced.compare(0, s.replacement.size(), s.replacement) == 0;
      const bool prepend = s.prepend == PreTokenizerStep::Prepend::kAlways ||
                           (s.prepend == PreTokenizerStep::Prepend::kFirst && piece.at_start);
      if (prepend && !starts) replaced.insert(0, s.replacement);
      storage->push_back(std::move(replaced));
      const Piece whole{storage->back(), piece.at_start};
      if (!s.split) {
        out->push_back(whole);
        return;
      }
      FindLiteral(whole.text, s.replacement, &matches);
      SplitByMatches(whole, matches, SplitBehavior::kMergedWithNext, false, out);
      return;
    }
  }
}

}  // namespace ps::tokenizer
