// PreTokenizer: the "pre_tokenizer" steps of a tokenizer.json that run before BPE's
// ByteLevel (or before the model when there is none), as HF `tokenizers` runs them: each
// step splits every piece of the previous one. Supported: Split (a literal string or an
// ICU regex; behaviours Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous;
// invert), Digits (individual_digits) and Metaspace (replacement, prepend_scheme,
// split). ByteLevel itself is the BPE model's (byte_level_bpe.h). Built once at load,
// then immutable: any thread.
#pragma once

#include <list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ps::tokenizer {

class RegexSplitter;

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct PreTokenizerStep {
  enum class Kind { kSplit, kDigits, kMetaspace };
  Kind kind = Kind::kSplit;
  // Split: the literal pattern (when `regex` is unset) or the ICU regex.
  std::string text;
  std::optional<std::string> regex;
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;
  // Digits: each digit a piece (else runs of digits).
  bool individual_digits = false;
  // Metaspace: what a space becomes ("▁"); prepend_scheme: "always", "first" (only a
  // piece at the start of the input) or "never"; split: split before each replacement.
  std::string replacement = "\u2581";
  enum class Prepend { kAlways, kFirst, kNever } prepend = Prepend::kAlways;
  bool split = true;
};

// A piece of text being pre-tokenised; `at_start`: it begins at offset 0 of the input
// given to Encode (Metaspace's prepend_scheme "first").
struct Piece {
  std::string_view text;
  bool at_start = false;
};

class PreTokenizer {
 public:
  PreTokenizer() = default;
  explicit PreTokenizer(std::vector<PreTokenizerStep> steps);  // TORCH_CHECKs the regexes
  PreTokenizer(PreTokenizer&&) noexcept;
  PreTokenizer& operator=(PreTokenizer&&) noexcept;
  ~PreTokenizer();

  bool empty() const { return steps_.empty(); }
  // Runs the steps over `pieces` in place (no empty pieces come out). Text a step
  // rewrites (Metaspace) is kept in `storage`, which must outlive the pieces.
  void Run(std::vector<Piece>* pieces, std::list<std::string>* storage) const;

 private:
  void RunStep(size_t step, Piece piece, std::vector<Piece>* out, std::list<std::string>* storage) const;

  std::vector<PreTokenizerStep> steps_;
  std::vector<std::unique_ptr<RegexSplitter>> regexes_;  // [steps] null where no regex
  // [steps] Isolated splits by the Llama 3 (3) or Qwen2 (1) pattern run SplitLlama3 with
  // these digit groups; 0 elsewhere.
  std::vector<int> llama3_digits_;
};

// HF's split of `text` by `matches` (sorted, non-overlapping [start, end) byte ranges)
// with `behavior`: appends the non-empty pieces to `out` (exposed for tests).
void SplitByMatches(Piece text, const std::vector<std::pair<size_t, size_t>>& matches, SplitBehavior behavior,
                    bool invert, std::vector<Piece>* out);

}  // namespace ps::tokenizer
