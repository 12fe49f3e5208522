#include "models/hf_llama_export.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <filesystem>
#include <set>

#include "models/hf_llama.h"

namespace ps::models {
namespace {

namespace fs = std::filesystem;

std::string ModelTypeOf(const std::string& architecture) {
  if (architecture == "Qwen2ForCausalLM") return "qwen2";
  if (architecture == "Qwen3ForCausalLM") return "qwen3";
  if (architecture == "MistralForCausalLM") return "mistral";
  return "llama";
}

// The rope fields of `config` into `j`, in the form `source` used.
void SetRope(const LlamaConfig& config, const nlohmann::json& source, nlohmann::json& j) {
  nlohmann::json params = {{"rope_type", "default"}};
  const RopeScaling& s = config.rope_scaling;
  if (s.type == RopeScalingType::kLinear) params = {{"rope_type", "linear"}, {"factor", s.factor}};
  if (s.type == RopeScalingType::kLlama3) {
    params = {{"rope_type", "llama3"},
              {"factor", s.factor},
              {"low_freq_factor", s.low_freq_factor},
              {"high_freq_factor", s.high_freq_factor},
              {"original_max_position_embeddings", s.original_max_position_embeddings}};
  }
  if (source.contains("rope_parameters")) {
    params["rope_theta"] = config.rope_theta;
    j["rope_parameters"] = params;
    j.erase("rope_theta");
    j.erase("rope_scaling");
    return;
  }
  j["rope_theta"] = config.rope_theta;
  if (s.type == RopeScalingType::kNone) {
    j["rope_scaling"] = nullptr;
  } else {
    params["type"] = params["rope_type"];  // transformers 4 reads either key
    j["rope_scaling"] = params;
  }
}

void SetAttention(const LlamaConfig& config, const std::string& architecture, nlohmann::json& j) {
  if (architecture == "Qwen2ForCausalLM") {
    TORCH_CHECK(config.qkv_bias && !config.o_bias, "HF export: Qwen2ForCausalLM has q/k/v biases and no o_proj bias");
    j.erase("attention_bias");
  } else if (architecture == "MistralForCausalLM") {
    TORCH_CHECK(!config.qkv_bias && !config.o_bias, "HF export: MistralForCausalLM has no attention biases");
    j.erase("attention_bias");
  } else {
    TORCH_CHECK(config.qkv_bias == config.o_bias, "HF export: ", architecture,
                " has biases on all of q/k/v/o_proj or on none (attention_bias)");
    j["attention_bias"] = config.qkv_bias;
  }
  TORCH_CHECK(config.qk_norm == (architecture == "Qwen3ForCausalLM"), "HF export: ", architecture,
              config.qk_norm ? " has no q/k norms" : " has q/k norms");
  if (architecture == "MistralForCausalLM") {
    j["sliding_window"] = config.sliding_window > 0 ? nlohmann::json(config.sliding_window) : nlohmann::json();
  } else {
    TORCH_CHECK(config.sliding_window == 0, "HF export: ", architecture, " has no sliding window");
  }
  j["attention_dropout"] = config.attention_dropout;
}

}  // namespace

std::string DerivedHfLlamaArchitecture(const LlamaConfig& config) {
  if (config.qk_norm) return "Qwen3ForCausalLM";
  if (config.qkv_bias && !config.o_bias) return "Qwen2ForCausalLM";
  if (config.sliding_window > 0) return "MistralForCausalLM";
  return "LlamaForCausalLM";
}

nlohmann::json HfLlamaConfigJson(const LlamaConfig& config, const std::string& architecture,
                                 const nlohmann::json& source, at::ScalarType dtype) {
  TORCH_CHECK(IsHfLlamaArchitecture(architecture), "HF export: ", architecture, " is not a Llama-family architecture");
  nlohmann::json j = source.is_object() ? source : nlohmann::json::object();
  j["architectures"] = {architecture};
  j["model_type"] = ModelTypeOf(architecture);
  j["num_hidden_layers"] = config.n_layer;
  j["num_attention_heads"] = config.n_head;
  j["num_key_value_heads"] = config.kv_heads();
  j["hidden_size"] = config.n_embd;
  j["head_dim"] = config.head_width();
  j["intermediate_size"] = config.mlp_width();
  j["max_position_embeddings"] = config.n_positions;
  j["vocab_size"] = config.vocab_size;
  j["rms_norm_eps"] = config.rms_norm_eps;
  j["initializer_range"] = config.init_std;
  j["tie_word_embeddings"] = config.tie_word_embeddings;
  j["hidden_act"] = "silu";
  if (architecture == "LlamaForCausalLM") j["mlp_bias"] = false;
  SetRope(config, source, j);
  SetAttention(config, architecture, j);
  j["torch_dtype"] = HfDtypeName(dtype);
  if (j.contains("dtype")) j["dtype"] = HfDtypeName(dtype);
  if (!j.contains("use_cache")) j["use_cache"] = true;
  return j;
}

std::vector<std::string> WriteHfLlamaWeights(const std::string& folder, const TensorMap& params,
                                             const LlamaConfig& config, const std::string& source_folder,
                                             const HfExportOptions& options) {
  TORCH_CHECK(fs::is_directory(folder), folder, ": export folder does not exist");
  const fs::path source_json = source_folder.empty() ? fs::path() : fs::path(source_folder) / "config.json";
  const nlohmann::json source = !source_json.empty() && fs::is_regular_file(source_json)
                                    ? ReadHfJson(source_json.string())
                                    : nlohmann::json::object();
  const std::string architecture = source.contains("architectures") ? ReadHfArchitecture(source_folder)
                                                                     : DerivedHfLlamaArchitecture(config);
  std::vector<std::string> written;
  WriteHfJsonFile((fs::path(folder) / "config.json").string(),
                  HfLlamaConfigJson(config, architecture, source, options.dtype));
  written.push_back("config.json");

  // HF names over the same tensors: SaveShardedSafetensors converts each while writing.
  TensorMap hf;
  std::set<std::string> expected;
  for (const ParameterShape& p : LlamaParameterShapes(config)) {
    expected.insert(p.name);
    const auto it = params.find(p.name);
    TORCH_CHECK(it != params.end(), "HF export: parameter '", p.name, "' is missing");
    TORCH_CHECK(it->second.numel() == p.numel, "HF export: parameter '", p.name, "' has ", it->second.numel(),
                " elements, the config says ", p.numel);
    hf.emplace(p.name == "lm_head.weight" ? p.name : "model." + p.name, it->second.detach());
  }
  for (const auto& [name, t] : params) {
    TORCH_CHECK(expected.count(name), "HF export: parameter '", name, "' is not part of this Llama-family model");
  }
  for (const auto& f : SaveShardedSafetensors(folder, hf, options.max_shard_bytes, options.dtype)) {
    written.push_back(f);
  }
  return written;
}

}  // namespace ps::models
