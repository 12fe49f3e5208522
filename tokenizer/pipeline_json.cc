#include "tokenizer/pipeline_json.h"

#include <c10/util/Exception.h>

#include "tokenizer/byte_level.h"  // RegexSplitter

namespace ps::tokenizer {
namespace {

using nlohmann::json;

std::string TypeOf(const json& j) {
  if (!j.is_object()) return "";
  const auto it = j.find("type");
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

// j[key] as T, `fallback` when absent or null; a wrong type names the file and field.
template <typename T>
T Field(const json& j, const char* key, const T& fallback, const std::string& file, const std::string& where) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  try {
    return it->get<T>();
  } catch (const json::exception&) {
    TORCH_CHECK(false, file, ": ", where, ".", key, " has the wrong type (", it->type_name(), ")");
  }
}

const json& List(const json& j, const char* key, const std::string& file, const std::string& where) {
  const auto it = j.find(key);
  TORCH_CHECK(it != j.end() && it->is_array(), file, ": ", where, ".", key, " must be an array");
  return *it;
}

// A {"String": s} or {"Regex": r} pattern: the literal in *text or the regex in *regex.
void ParsePattern(const json& j, const std::string& file, const std::string& where, std::string* text,
                  std::optional<std::string>* regex) {
  const json pattern = j.value("pattern", json());
  if (pattern.is_object() && pattern.contains("String") && pattern["String"].is_string()) {
    *text = pattern["String"].get<std::string>();
  } else if (pattern.is_object() && pattern.contains("Regex") && pattern["Regex"].is_string()) {
    *regex = pattern["Regex"].get<std::string>();
    try {
      RegexSplitter compiled(**regex);  // the pipeline compiles it again; an error here names the field
    } catch (const c10::Error& e) {
      TORCH_CHECK(false, file, ": ", where, ".pattern.Regex: ", e.what_without_backtrace());
    }
  } else {
    TORCH_CHECK(false, file, ": ", where, ".pattern must be {\"String\": ...} or {\"Regex\": ...}");
  }
}

void AddNormalizer(const json& n, const std::string& file, const std::string& where,
                   std::vector<NormalizerStep>* steps) {
  const std::string type = TypeOf(n);
  NormalizerStep s;
  if (type == "Sequence") {
    const json& list = List(n, "normalizers", file, where);
    for (size_t i = 0; i < list.size(); ++i) {
      AddNormalizer(list[i], file, where + ".normalizers[" + std::to_string(i) + "]", steps);
    }
    return;
  }
  if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    s.kind = type == "NFC"    ? NormalizerStep::Kind::kNfc
             : type == "NFD"  ? NormalizerStep::Kind::kNfd
             : type == "NFKC" ? NormalizerStep::Kind::kNfkc
                              : NormalizerStep::Kind::kNfkd;
  } else if (type == "Prepend") {
    s.kind = NormalizerStep::Kind::kPrepend;
    s.text = Field<std::string>(n, "prepend", "", file, where);
  } else if (type == "Replace") {
    s.kind = NormalizerStep::Kind::kReplace;
    ParsePattern(n, file, where, &s.text, &s.regex);
    s.content = Field<std::string>(n, "content", "", file, where);
  } else if (type == "Strip") {
    s.kind = NormalizerStep::Kind::kStrip;
    s.strip_left = Field<bool>(n, "strip_left", false, file, where);
    s.strip_right = Field<bool>(n, "strip_right", false, file, where);
  } else {
    TORCH_CHECK(false, file, ": unsupported normalizer '", type.empty() ? "?" : type, "' at ", where,
                " (supported for BPE: Sequence, NFC, NFD, NFKC, NFKD, Prepend, Replace, Strip)");
  }
  steps->push_back(std::move(s));
}

SplitBehavior ParseBehavior(const json& p, const std::string& file, const std::string& where) {
  const std::string b = Field<std::string>(p, "behavior", "", file, where);
  if (b == "Removed") return SplitBehavior::kRemoved;
  if (b == "Isolated") return SplitBehavior::kIsolated;
  if (b == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (b == "Contiguous") return SplitBehavior::kContiguous;
  TORCH_CHECK(false, file, ": ", where, ".behavior '", b,
              "' is not one of Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous");
}

// Metaspace's prepend_scheme, or the older add_prefix_space.
PreTokenizerStep::Prepend ParsePrependScheme(const json& m, const std::string& file, const std::string& where) {
  if (!m.contains("prepend_scheme")) {
    return Field<bool>(m, "add_prefix_space", true, file, where) ? PreTokenizerStep::Prepend::kAlways
                                                                 : PreTokenizerStep::Prepend::kNever;
  }
  const std::string scheme = Field<std::string>(m, "prepend_scheme", "always", file, where);
  if (scheme == "always") return PreTokenizerStep::Prepend::kAlways;
  if (scheme == "first") return PreTokenizerStep::Prepend::kFirst;
  if (scheme == "never") return PreTokenizerStep::Prepend::kNever;
  TORCH_CHECK(false, file, ": ", where, ".prepend_scheme '", scheme, "' is not one of always, first, never");
}

void AddPreTokenizer(const json& p, const std::string& file, const std::string& where, PreTokenizerJson* out) {
  const std::string type = TypeOf(p);
  TORCH_CHECK(!out->byte_level, file, ": pre_tokenizer '", type, "' at ", where,
              " comes after ByteLevel (supported: ByteLevel last)");
  PreTokenizerStep s;
  if (type == "Sequence") {
    const json& list = List(p, "pretokenizers", file, where);
    for (size_t i = 0; i < list.size(); ++i) {
      AddPreTokenizer(list[i], file, where + ".pretokenizers[" + std::to_string(i) + "]", out);
    }
    return;
  }
  if (type == "ByteLevel") {
    out->byte_level = true;
    out->add_prefix_space = Field<bool>(p, "add_prefix_space", false, file, where);
    out->use_regex = Field<bool>(p, "use_regex", true, file, where);
    return;
  }
  if (type == "Split") {
    s.kind = PreTokenizerStep::Kind::kSplit;
    ParsePattern(p, file, where, &s.text, &s.regex);
    s.behavior = ParseBehavior(p, file, where);
    s.invert = Field<bool>(p, "invert", false, file, where);
  } else if (type == "Digits") {
    s.kind = PreTokenizerStep::Kind::kDigits;
    s.individual_digits = Field<bool>(p, "individual_digits", false, file, where);
  } else if (type == "Metaspace") {
    s.kind = PreTokenizerStep::Kind::kMetaspace;
    s.replacement = Field<std::string>(p, "replacement", "\u2581", file, where);
    s.prepend = ParsePrependScheme(p, file, where);
    s.split = Field<bool>(p, "split", true, file, where);
  } else {
    TORCH_CHECK(false, file, ": unsupported pre_tokenizer '", type.empty() ? "?" : type, "' at ", where,
                " (supported for BPE: Sequence, Split, Digits, Metaspace, ByteLevel)");
  }
  out->steps.push_back(std::move(s));
}

void AddDecoder(const json& d, const std::string& file, const std::string& where, std::vector<DecoderStep>* steps) {
  const std::string type = TypeOf(d);
  DecoderStep s;
  if (type == "Sequence") {
    const json& list = List(d, "decoders", file, where);
    for (size_t i = 0; i < list.size(); ++i) {
      AddDecoder(list[i], file, where + ".decoders[" + std::to_string(i) + "]", steps);
    }
    return;
  }
  if (type == "ByteLevel") {
    s.kind = DecoderStep::Kind::kByteLevel;
  } else if (type == "Metaspace") {
    s.kind = DecoderStep::Kind::kMetaspace;
    s.replacement = Field<std::string>(d, "replacement", "\u2581", file, where);
    s.prepended = ParsePrependScheme(d, file, where) != PreTokenizerStep::Prepend::kNever;
  } else if (type == "ByteFallback") {
    s.kind = DecoderStep::Kind::kByteFallback;
  } else if (type == "Fuse") {
    s.kind = DecoderStep::Kind::kFuse;
  } else if (type == "Strip") {
    s.kind = DecoderStep::Kind::kStrip;
    s.content = Field<std::string>(d, "content", " ", file, where);
    s.start_chars = Field<int64_t>(d, "start", 0, file, where);
    s.stop_chars = Field<int64_t>(d, "stop", 0, file, where);
  } else if (type == "Replace") {
    s.kind = DecoderStep::Kind::kReplace;
    ParsePattern(d, file, where, &s.pattern, &s.regex);
    s.content = Field<std::string>(d, "content", "", file, where);
  } else {
    TORCH_CHECK(false, file, ": unsupported decoder '", type.empty() ? "?" : type, "' at ", where,
                " (supported for BPE: Sequence, ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace)");
  }
  steps->push_back(std::move(s));
}

void AddPostProcessor(const json& p, const std::string& file, const std::string& where, PostProcessorJson* out) {
  const std::string type = TypeOf(p);
  if (type == "Sequence") {
    const json& list = List(p, "processors", file, where);
    for (size_t i = 0; i < list.size(); ++i) {
      AddPostProcessor(list[i], file, where + ".processors[" + std::to_string(i) + "]", out);
    }
    return;
  }
  if (type == "ByteLevel") return;  // offsets only
  TORCH_CHECK(type == "TemplateProcessing", file, ": unsupported post_processor '", type.empty() ? "?" : type,
              "' at ", where, " (supported: Sequence, ByteLevel, TemplateProcessing)");
  const json& single = List(p, "single", file, where);
  const json specials = p.value("special_tokens", json::object());
  bool seen_text = false;
  for (size_t i = 0; i < single.size(); ++i) {
    const json& piece = single[i];
    if (piece.contains("Sequence")) {
      seen_text = true;
      continue;
    }
    const std::string id = piece.contains("SpecialToken") ? piece["SpecialToken"].value("id", "") : "";
    TORCH_CHECK(!id.empty() && specials.contains(id), file, ": ", where, ".single[", i,
                "] names no token of special_tokens");
    for (const json& token_id : List(specials[id], "ids", file, where + ".special_tokens." + id)) {
      TORCH_CHECK(token_id.is_number_integer() && token_id.get<int64_t>() >= 0 &&
                      token_id.get<int64_t>() <= INT32_MAX,
                  file, ": ", where, ".special_tokens.", id, ".ids holds ", token_id.dump(), ", not a token id");
      (seen_text ? out->suffix_ids : out->prefix_ids).push_back(token_id.get<int32_t>());
    }
  }
}

}  // namespace

std::vector<NormalizerStep> ParseNormalizerJson(const json& normalizer, const std::string& file) {
  std::vector<NormalizerStep> steps;
  if (!normalizer.is_null()) AddNormalizer(normalizer, file, "normalizer", &steps);
  return steps;
}

PreTokenizerJson ParsePreTokenizerJson(const json& pre_tokenizer, const std::string& file) {
  PreTokenizerJson out;
  if (!pre_tokenizer.is_null()) AddPreTokenizer(pre_tokenizer, file, "pre_tokenizer", &out);
  return out;
}

std::vector<DecoderStep> ParseDecoderJson(const json& decoder, const std::string& file) {
  std::vector<DecoderStep> steps;
  if (!decoder.is_null()) AddDecoder(decoder, file, "decoder", &steps);
  return steps;
}

PostProcessorJson ParsePostProcessorJson(const json& post_processor, const std::string& file) {
  PostProcessorJson out;
  if (!post_processor.is_null()) AddPostProcessor(post_processor, file, "post_processor", &out);
  return out;
}

}  // namespace ps::tokenizer
