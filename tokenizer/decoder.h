// Decoder: the "decoder" of a BPE tokenizer.json, as HF `tokenizers` runs it on the token
// strings of the ids (`decode(ids, skip_special_tokens=False)`): a list of steps, each
// turning a list of token strings into another (a "Sequence" is flattened into it), the
// result joined with no separator. Supported: ByteLevel, Metaspace, ByteFallback, Fuse,
// Strip, Replace (literal or ICU regex). No decoder at all joins the tokens with ' '.
// Built once at load, then immutable: any thread.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ps::tokenizer {

class RegexSplitter;

struct DecoderStep {
  enum class Kind { kByteLevel, kMetaspace, kByteFallback, kFuse, kStrip, kReplace };
  Kind kind = Kind::kByteLevel;
  // Metaspace: the replacement ("▁") and whether a prefix was prepended (prepend_scheme
  // other than "never": the first token's replacements are dropped).
  std::string replacement = "\u2581";
  bool prepended = true;
  // Strip: the character (UTF-8) and how many of it to remove at most from the start and
  // the end of each token.
  std::string content;
  int64_t start_chars = 0;
  int64_t stop_chars = 0;
  // Replace: the literal pattern (when `regex` is unset) or the ICU regex; `content` is
  // what each match becomes.
  std::string pattern;
  std::optional<std::string> regex;
};

class Decoder {
 public:
  // No steps: tokens joined by ' ' (HF without a decoder).
  Decoder() = default;
  explicit Decoder(std::vector<DecoderStep> steps);  // TORCH_CHECKs the regexes
  Decoder(Decoder&&) noexcept;
  Decoder& operator=(Decoder&&) noexcept;
  ~Decoder();

  bool empty() const { return steps_.empty(); }
  // Whether the only step is ByteLevel (the byte-level BPE fast path).
  bool byte_level_only() const { return steps_.size() == 1 && steps_[0].kind == DecoderStep::Kind::kByteLevel; }
  // The text of `tokens` (valid UTF-8: invalid byte sequences become U+FFFD).
  std::string Decode(std::vector<std::string> tokens) const;

 private:
  void RunStep(size_t step, std::vector<std::string>* tokens) const;

  std::vector<DecoderStep> steps_;
  std::vector<std::unique_ptr<RegexSplitter>> regexes_;  // [steps] null where no regex
};

// HF's ByteLevel decoding of one token: the bytes its characters stand for, or its own
// UTF-8 when any character stands for no byte (exposed for the BPE fast path).
std::string ByteLevelTokenBytes(const std::string& token);

}  // namespace ps::tokenizer
