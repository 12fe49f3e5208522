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
