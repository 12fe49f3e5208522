#include "tokenizer/byte_level.h"

#include <c10/util/Exception.h>
#include <unicode/regex.h>
#include <unicode/uchar.h>
#include <unicode/utext.h>

#include <array>

#include "tokenizer/utf8.h"

namespace ps::tokenizer {
namespace {

enum CharClass : uint8_t { kLetter, kNumber, kSpace, kOther };

// Classes of the ASCII characters, by code.
constexpr std::array<CharClass, 128> kAsciiClasses = [] {
  std::array<CharClass, 128> classes{};
  for (int c = 0; c < 128; ++c) {
    if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') {
      classes[c] = kLetter;
    } else if (c >= '0' && c <= '9') {
      classes[c] = kNumber;
    } else if ((c >= 0x09 && c <= 0x0D) || c == ' ') {
      classes[c] = kSpace;
    } else {
      classes[c] = kOther;
    }
  }
  return classes;
}();

inline CharClass ClassOf(char32_t c) {
  if (c < 0x80) return kAsciiClasses[c];
  switch (u_charType(c)) {
    case U_UPPERCASE_LETTER:
    case U_LOWERCASE_LETTER:
    case U_TITLECASE_LETTER:
    case U_MODIFIER_LETTER:
    case U_OTHER_LETTER:
      return kLetter;
    case U_DECIMAL_DIGIT_NUMBER:
    case U_LETTER_NUMBER:
    case U_OTHER_NUMBER:
      return kNumber;
    default:
      return u_isUWhiteSpace(c) ? kSpace : kOther;
  }
}

// Position after the run of characters of class `cls` starting at `pos`.
size_t RunEnd(std::string_view text, size_t pos, CharClass cls) {
  while (pos < text.size()) {
    const auto b = static_cast<uint8_t>(text[pos]);
    if (b < 0x80) {  // ASCII fast path
      if (kAsciiClasses[b] != cls) break;
      ++pos;
      continue;
    }
    size_t next = pos;
    if (ClassOf(NextCodePoint(text, &next)) != cls) break;
    pos = next;
  }
  return pos;
}

// Length of a contraction ('s 't 're 've 'm 'll 'd) at `pos`, or 0.
size_t ContractionBytes(std::string_view text, size_t pos) {
  if (text[pos] != '\'' || pos + 1 >= text.size()) return 0;
  const char a = text[pos + 1];
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (pos + 2 >= text.size()) return 0;
  const char b = text[pos + 2];
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

}  // namespace

void SplitGpt2(std::string_view text, std::vector<std::string_view>* pieces) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end;
    if (const size_t n = ContractionBytes(text, pos); n > 0) {
      end = pos + n;
    } else {
      size_t next = pos;
      const char32_t c = NextCodePoint(text, &next);
      CharClass cls = ClassOf(c);
      if (c == ' ' && next < text.size()) {
        // " ?X+": a space joins the run of letters, numbers or others after it.
        size_t after = next;
        const CharClass next_cls = ClassOf(NextCodePoint(text, &after));
        if (next_cls != kSpace) {
          cls = next_cls;
          next = after;
        }
      }
      if (cls != kSpace) {
        end = RunEnd(text, next, cls);
      } else {
        // \s+(?!\S) takes the whole run at the end of the text and otherwise the run less
        // its last character (which belongs to the next piece); a one-character run before
        // a non-space is \s+.
        end = RunEnd(text, next, kSpace);
        if (end < text.size()) {
          size_t last = end - 1;
          while ((static_cast<uint8_t>(text[last]) & 0xC0) == 0x80) --last;
          if (last > pos) end = last;
        }
      }
    }
    pieces->push_back(text.substr(pos, end - pos));
    pos = end;
  }
}

namespace {

// (?i:'s|'t|'re|'ve|'m|'ll|'d) at `pos`: its length, or 0. Case folding makes U+017F
// (long s) an 's' too.
size_t CaselessContractionBytes(std::string_view text, size_t pos) {
  if (text[pos] != '\'' || pos + 1 >= text.size()) return 0;
  const char a = static_cast<char>(text[pos + 1] | 0x20);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (text.compare(pos + 1, 2, "\xC5\xBF") == 0) return 3;  // U+017F
  if (pos + 2 >= text.size()) return 0;
  const char b = static_cast<char>(text[pos + 2] | 0x20);
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

// End of the match of the Llama 3 pattern's whitespace alternatives at `pos` (a space).
size_t WhitespaceMatchEnd(std::string_view text, size_t pos) {
  const size_t run_end = RunEnd(text, pos, kSpace);
  // \s*[\r\n]+: up to the last \r or \n of the run.
  for (size_t p = run_end; p > pos; --p) {
    if (text[p - 1] == '\r' || text[p - 1] == '\n') return p;
  }
  // \s+(?!\S), else \s+ (as in SplitGpt2).
  if (run_end == text.size()) return run_end;
  size_t last = run_end - 1;
  while ((static_cast<uint8_t>(text[last]) & 0xC0) == 0x80) --last;
  return last > pos ? last : run_end;
}

}  // namespace

void SplitLlama3(std::string_view text, int max_digits, std::vector<std::string_view>* pieces) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = CaselessContractionBytes(text, pos);
    if (end > 0) {
      end += pos;
    } else {
      size_t next = pos;
      const char32_t c = NextCodePoint(text, &next);
      const CharClass cls = ClassOf(c);
      size_t after = next;
      const CharClass next_cls = next < text.size() ? ClassOf(NextCodePoint(text, &after)) : kOther;
      if (cls == kLetter) {  // \p{L}+
        end = RunEnd(text, next, kLetter);
      } else if (cls != kNumber && c != '\r' && c != '\n' && next < text.size() && next_cls == kLetter) {
        end = RunEnd(text, after, kLetter);  // [^\r\n\p{L}\p{N}]\p{L}+
      } else if (cls == kNumber) {  // \p{N}{1,max_digits}
        end = next;
        for (int n = 1; n < max_digits && end < text.size(); ++n) {
          size_t p = end;
          if (ClassOf(NextCodePoint(text, &p)) != kNumber) break;
          end = p;
        }
      } else if (cls == kOther || (c == ' ' && next < text.size() && next_cls == kOther)) {
        // " ?[^\s\p{L}\p{N}]+[\r\n]*"
        end = RunEnd(text, cls == kOther ? next : after, kOther);
        while (end < text.size() && (text[end] == '\r' || text[end] == '\n')) ++end;
      } else {
        end = WhitespaceMatchEnd(text, pos);
      }
    }
    pieces->push_back(text.substr(pos, end - pos));
    pos = end;
  }
}

RegexSplitter::RegexSplitter(const std::string& pattern) {
  UErrorCode status = U_ZERO_ERROR;
  UParseError parse_error;
  pattern_.reset(icu::RegexPattern::compile(icu::UnicodeString::fromUTF8(pattern), 0, parse_error, status));
  TORCH_CHECK(U_SUCCESS(status), "tokenizer: cannot compile the regex '", pattern, "' (", u_errorName(status),
              " at offset ", parse_error.offset, ")");
}

RegexSplitter::~RegexSplitter() = default;

void RegexSplitter::Split(std::string_view text, std::vector<std::string_view>* pieces) const {
  std::vector<std::pair<size_t, size_t>> matches;
  FindAll(text, &matches);
  size_t done = 0;
  for (const auto& [start, end] : matches) {
    if (end == start) continue;
    if (start > done) pieces->push_back(text.substr(done, start - done));
    pieces->push_back(text.substr(start, end - start));
    done = end;
  }
  if (done < text.size()) pieces->push_back(text.substr(done));
}

void RegexSplitter::FindAll(std::string_view text, std::vector<std::pair<size_t, size_t>>* matches) const {
  UErrorCode status = U_ZERO_ERROR;
  UText* utext = utext_openUTF8(nullptr, text.data(), static_cast<int64_t>(text.size()), &status);
  std::unique_ptr<icu::RegexMatcher> matcher(pattern_->matcher(status));
  TORCH_CHECK(U_SUCCESS(status), "tokenizer: ICU regex matcher: ", u_errorName(status));
  matcher->reset(utext);
  while (matcher->find(status) && U_SUCCESS(status)) {
    matches->emplace_back(static_cast<size_t>(matcher->start64(status)),
                          static_cast<size_t>(matcher->end64(status)));
  }
  matcher.reset();
  utext_close(utext);
  TORCH_CHECK(U_SUCCESS(status), "tokenizer: ICU regex search: ", u_errorName(status));
}

char32_t ByteToChar(uint8_t b) {
  auto printable = [](int x) { return (x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174; };
  if (printable(b)) return b;
  int rank = 0;
  for (int x = 0; x < b; ++x) rank += !printable(x);
  return 256 + rank;
}

int CharToByte(char32_t c) {
  if (c < 256) return ByteToChar(static_cast<uint8_t>(c)) == c ? static_cast<int>(c) : -1;
  if (c >= 256 + 68) return -1;
  for (int b = 0; b < 256; ++b) {
    if (ByteToChar(static_cast<uint8_t>(b)) == c) return b;
  }
  return -1;
}

}  // namespace ps::tokenizer
