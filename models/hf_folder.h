// HF model folders, independent of the architecture: their JSON files and the list of
// safetensors files holding the weights (one model.safetensors, or the shards that
// model.safetensors.index.json names). Errors name the file.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/safetensors.h"

namespace ps::models {

// What an export writes besides the parameters.
struct HfExportOptions {
  int64_t max_shard_bytes = 5'000'000'000;  // HF's default "5GB": above it, shards + index
  int64_t eos_token_id = -1;                 // written as bos/eos_token_id when >= 0 (GPT-2)
  at::ScalarType dtype = at::kFloat;         // the weights' dtype in the files (fp32, bf16 or fp16)
};

// config.json's name of `dtype` ("float32", "bfloat16", "float16"); throws for others.
std::string HfDtypeName(at::ScalarType dtype);

// Parses `path`; throws c10::Error naming it when it is missing or not valid JSON.
nlohmann::json ReadHfJson(const std::string& path);

// Writes `j` (indented) to `path` through `path`.tmp and a rename.
void WriteHfJsonFile(const std::string& path, const nlohmann::json& j);

// The weight files of the HF folder `folder` (paths), index first if there is one.
// Throws when the folder is missing or has no safetensors weights.
std::vector<std::string> HfWeightFiles(const std::string& folder);

// j[key] as an integer; throws naming `path` and the key when missing or not one.
int64_t HfIntKey(const nlohmann::json& j, const std::string& key, const std::string& path);
// j[key] as a layer count: an integer in [1, 10000] (model.n_layer's bound; a larger
// count would build a table of expected weights per layer before any file is read).
int64_t HfLayersKey(const nlohmann::json& j, const std::string& key, const std::string& path);
// Optional keys: `fallback` when missing or null; else throws c10::Error naming `path`,
// the key and its value when it is not of the type (a number, true/false, a string).
double HfNumberKey(const nlohmann::json& j, const std::string& key, const std::string& path, double fallback);
int64_t HfIntKey(const nlohmann::json& j, const std::string& key, const std::string& path, int64_t fallback);
bool HfBoolKey(const nlohmann::json& j, const std::string& key, const std::string& path, bool fallback);
std::string HfStringKey(const nlohmann::json& j, const std::string& key, const std::string& path,
                        const std::string& fallback);

// The end-of-sequence ids of an HF folder: generation_config.json's eos_token_id (an
// integer or a list of them), else config.json's; empty when neither file names one
// (null counts as none). Throws naming the file when the field is another JSON type.
std::vector<int64_t> ReadHfEosTokenIds(const std::string& folder);

bool StartsWith(const std::string& s, const std::string& prefix);
bool EndsWith(const std::string& s, const std::string& suffix);

// How an architecture's HF weights map onto its ps parameters.
struct HfWeightMapping {
  std::map<std::string, std::vector<int64_t>> expected;     // ps name -> shape
  std::function<std::string(const std::string&)> ps_name;   // HF key -> ps name
  std::function<std::string(const std::string&)> hf_name;   // ps name -> HF key (messages)
  // ps names present in folders that are not parameters here (buffers, tied copies,
  // another head): skipped.
  std::function<bool(const std::string&)> skip;
  // Parameters a folder may lack (a new head): listed in `missing` instead of an error.
  std::function<bool(const std::string&)> may_be_missing = [](const std::string&) { return false; };
  // HF layout -> ps layout (a view), e.g. GPT-2's Conv1D transpose; and the note added
  // to a shape error about it.
  std::function<at::Tensor(const std::string&, const at::Tensor&)> to_ps_layout;
  std::function<std::string(const std::string&)> layout_note;
  std::string model;  // "a GPT-2 with 12 layers": for messages
};

struct HfMappedWeights {
  TensorMap params;                  // ps name -> memory-mapped view
  std::vector<std::string> missing;  // parameters may_be_missing allowed to be absent
};

// The weights of `folder` by ps name, as memory-mapped views: each tensor checked to be
// expected (else an error naming the file and key, unless skipped), floating point, in
// one file only, shaped as expected; every expected parameter present.
HfMappedWeights MapHfWeights(const std::string& folder, const HfWeightMapping& m);

}  // namespace ps::models
