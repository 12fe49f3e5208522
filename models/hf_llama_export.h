// HF Llama-family folders out: config.json for LlamaForCausalLM, Qwen2ForCausalLM,
// Qwen3ForCausalLM or MistralForCausalLM and the weights under HF's names ("model."
// prefix; "lm_head.weight" when untied), in the export dtype, sharded above the shard
// size with model.safetensors.index.json, as `transformers` saves them. The inverse of
// models/hf_llama.h: a folder this writes reads back to the same LlamaConfig and
// parameters (rounded to the dtype).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/hf_folder.h"
#include "models/llama_config.h"
#include "models/safetensors.h"

namespace ps::models {

// The architecture a LlamaConfig is when no source folder names one: q/k norms ->
// Qwen3ForCausalLM; q/k/v biases without an o_proj bias -> Qwen2ForCausalLM; a sliding
// window -> MistralForCausalLM; else LlamaForCausalLM.
std::string DerivedHfLlamaArchitecture(const LlamaConfig& config);

// config.json of `config` as `architecture`: `source` (the config.json the run started
// from, or an empty object) with every field ReadHfLlamaConfig reads set from `config`
// (its other fields, such as bos/eos ids, kept), rope in the form `source` used
// (transformers 5's rope_parameters, else rope_theta + rope_scaling), and torch_dtype
// (and transformers 5's dtype) naming `dtype`.
nlohmann::json HfLlamaConfigJson(const LlamaConfig& config, const std::string& architecture,
                                 const nlohmann::json& source, at::ScalarType dtype);

// Writes `folder`/config.json (HfLlamaConfigJson of the source folder's config.json when
// `source_folder` has one, else of the derived architecture) and the weights of `params`
// (ps names, fp32 masters, any device) as options.dtype, converted one tensor at a time.
// Every parameter of `config` must be in `params` with its shape, and nothing else.
// The folder must exist. Returns the file names written.
std::vector<std::string> WriteHfLlamaWeights(const std::string& folder, const TensorMap& params,
                                             const LlamaConfig& config, const std::string& source_folder,
                                             const HfExportOptions& options);

}  // namespace ps::models
