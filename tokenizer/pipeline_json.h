// Reading the pipeline of a BPE tokenizer.json (normalizer, pre_tokenizer, decoder,
// post_processor) into the typed steps of normalizer.h, pre_tokenizer.h and decoder.h.
// Every error names the file, the JSON field (e.g. `pre_tokenizer.pretokenizers[1]`) and
// the unsupported type or bad value, and lists what is supported. Stateless functions;
// used by tokenizer.cc only (keeps nlohmann JSON out of the component headers).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tokenizer/decoder.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"

namespace ps::tokenizer {

// `normalizer` (null for none).
std::vector<NormalizerStep> ParseNormalizerJson(const nlohmann::json& normalizer, const std::string& file);

struct PreTokenizerJson {
  std::vector<PreTokenizerStep> steps;  // those before ByteLevel
  bool byte_level = false;              // a ByteLevel pre-tokenizer ends the list
  bool add_prefix_space = false;        // its options
  bool use_regex = true;
};
// `pre_tokenizer` (null for none). ByteLevel may only come last.
PreTokenizerJson ParsePreTokenizerJson(const nlohmann::json& pre_tokenizer, const std::string& file);

// `decoder` (null for none).
std::vector<DecoderStep> ParseDecoderJson(const nlohmann::json& decoder, const std::string& file);

// The special tokens TemplateProcessing's "single" template puts before and after the
// text (ByteLevel post-processors change offsets only and are skipped).
struct PostProcessorJson {
  std::vector<int32_t> prefix_ids;
  std::vector<int32_t> suffix_ids;
};
PostProcessorJson ParsePostProcessorJson(const nlohmann::json& post_processor, const std::string& file);

}  // namespace ps::tokenizer
