// The byte-level pieces of GPT-2's tokenizer: the pre-tokenization pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// as a hand-written scanner (SplitGpt2, the fast path) and as an ICU regex
// (RegexSplitter, the reference the tests compare it with, and the splitter of any other
// pattern), and the byte <-> printable-character map of HF's ByteLevel.
// Immutable after construction; any thread.
#pragma once

#include <unicode/uversion.h>  // U_NAMESPACE_BEGIN: ICU's namespace is versioned

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

U_NAMESPACE_BEGIN
class RegexPattern;
U_NAMESPACE_END

namespace ps::tokenizer {

inline constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Appends to `pieces` the matches of kGpt2Pattern in `text` (valid UTF-8), which cover it.
void SplitGpt2(std::string_view text, std::vector<std::string_view>* pieces);

// The Llama 3 pattern (digits in groups of 1-3) and Qwen2's (single digits):
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
//   \s*[\r\n]+|\s+(?!\S)|\s+
inline constexpr const char* kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
inline constexpr const char* kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Appends to `pieces` the matches of the Llama 3 pattern (`max_digits` 3) or Qwen2's (1)
// in `text` (valid UTF-8), which cover it: a hand-written scanner, as SplitGpt2, because
// ICU's engine runs these patterns at a few MB/s (the tests compare it with ICU).
void SplitLlama3(std::string_view text, int max_digits, std::vector<std::string_view>* pieces);

// Splits by an ICU regex, keeping matches and the text between them as pieces (HF's
// Split with behavior "Isolated"); empty matches are skipped.
class RegexSplitter {
 public:
  explicit RegexSplitter(const std::string& pattern);  // TORCH_CHECK names a bad pattern
  ~RegexSplitter();
  void Split(std::string_view text, std::vector<std::string_view>* pieces) const;
  // Appends the [start, end) byte ranges of the matches in `text` (valid UTF-8), left to
  // right, empty matches included (HF's Split and Replace build on them).
  void FindAll(std::string_view text, std::vector<std::pair<size_t, size_t>>* matches) const;

 private:
  std::unique_ptr<icu::RegexPattern> pattern_;
};

// The code point HF's ByteLevel writes for byte `b`: printable Latin-1 bytes stand for
// themselves, the 68 others are U+0100 + their rank (' ' -> U+0120 'Ġ').
char32_t ByteToChar(uint8_t b);
// The inverse: the byte of code point `c`, or -1 when `c` stands for none.
int CharToByte(char32_t c);

}  // namespace ps::tokenizer
