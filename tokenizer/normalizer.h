// Normalizer: the "normalizer" of a tokenizer.json for BPE models, as HF `tokenizers`
// applies it to each piece of text between added tokens: a list of steps run in order
// (a "Sequence" is flattened into it). Supported steps: NFC, NFD, NFKC, NFKD (ICU),
// Prepend, Replace (a literal string or an ICU regex) and Strip. Built once at load,
// then immutable: any thread.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ps::tokenizer {

class RegexSplitter;

struct NormalizerStep {
  enum class Kind { kNfc, kNfd, kNfkc, kNfkd, kPrepend, kReplace, kStrip };
  Kind kind = Kind::kNfc;
  // Prepend: the text put in front of a non-empty input. Replace: the literal pattern
  // (when `regex` is unset).
  std::string text;
  // Replace with a "Regex" pattern: the ICU pattern.
  std::optional<std::string> regex;
  // Replace: what each match becomes.
  std::string content;
  // Strip: remove leading / trailing whitespace (Unicode White_Space).
  bool strip_left = false;
  bool strip_right = false;
};
const char* ToString(NormalizerStep::Kind kind);

class Normalizer {
 public:
  Normalizer() = default;
  // TORCH_CHECKs the regexes (the error names the pattern).
  explicit Normalizer(std::vector<NormalizerStep> steps);
  Normalizer(Normalizer&&) noexcept;
  Normalizer& operator=(Normalizer&&) noexcept;
  ~Normalizer();

  bool empty() const { return steps_.empty(); }
  // `text` (valid UTF-8) normalised; valid UTF-8.
  std::string Normalize(std::string_view text) const;

 private:
  std::vector<NormalizerStep> steps_;
  std::vector<std::unique_ptr<RegexSplitter>> regexes_;  // [steps] null where no regex
};

}  // namespace ps::tokenizer
