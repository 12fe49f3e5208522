#include "models/hf_llama.h"

#include <c10/util/Exception.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <vector>

#include "models/hf_folder.h"

namespace ps::models {
namespace {

namespace fs = std::filesystem;

const char* const kArchitectures[] = {"LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM",
                                      "MistralForCausalLM"};

// Fields of mixture-of-experts variants: a dense decoder would silently drop the experts.
const char* const kMoeFields[] = {"num_experts", "num_local_experts", "n_routed_experts", "num_experts_per_tok",
                                  "moe_intermediate_size", "n_shared_experts"};

// One config.json being read: typed getters whose errors name the file and the field.
struct ConfigJson {
  const nlohmann::json& j;
  const std::string& path;

  bool Has(const std::string& key) const { return j.contains(key) && !j[key].is_null(); }
  double Double(const nlohmann::json& from, const std::string& key, double fallback, const std::string& where) const {
    if (!from.contains(key) || from[key].is_null()) return fallback;
    TORCH_CHECK(from[key].is_number(), path, ": field ", where, key, " is ", from[key].dump(), ", not a number");
    return from[key].get<double>();
  }
  double Double(const std::string& key, double fallback) const { return Double(j, key, fallback, ""); }
  int64_t Int(const std::string& key) const { return HfIntKey(j, key, path); }
  bool Bool(const std::string& key, bool fallback) const { return HfBoolKey(j, key, path, fallback); }
  void Refuse(bool bad, const std::string& key, const std::string& why) const {
    TORCH_CHECK(!bad, path, ": field ", key, " = ", j.contains(key) ? j[key].dump() : "?", " is not supported (", why,
                ")");
  }
};

// rope_parameters (transformers 5) or rope_scaling + rope_theta (earlier).
void ReadRope(const ConfigJson& cj, LlamaConfig& c) {
  const bool v5 = cj.Has("rope_parameters");
  const std::string field = v5 ? "rope_parameters" : "rope_scaling";
  c.rope_theta = cj.Double("rope_theta", 10000.0);
  if (!cj.Has(field)) return;
  const nlohmann::json& r = cj.j[field];
  TORCH_CHECK(r.is_object(), cj.path, ": field ", field, " is ", r.dump(), ", not an object");
  if (v5) c.rope_theta = cj.Double(r, "rope_theta", c.rope_theta, field + ".");
  cj.Refuse(cj.Double(r, "partial_rotary_factor", 1.0, field + ".") != 1.0, field,
            "partial_rotary_factor: every dimension of a head is rotated here");
  const std::string type_key = r.contains("rope_type") ? "rope_type" : "type";
  const std::string type = r.value(type_key, std::string("default"));
  RopeScaling& s = c.rope_scaling;
  if (type == "default") return;
  s.factor = cj.Double(r, "factor", 1.0, field + ".");
  if (type == "linear") {
    s.type = RopeScalingType::kLinear;
  } else if (type == "llama3") {
    s.type = RopeScalingType::kLlama3;
    s.low_freq_factor = cj.Double(r, "low_freq_factor", 1.0, field + ".");
    s.high_freq_factor = cj.Double(r, "high_freq_factor", 4.0, field + ".");
    TORCH_CHECK(r.contains("original_max_position_embeddings"), cj.path, ": field ", field,
                ".original_max_position_embeddings is missing (rope type llama3 needs it)");
    s.original_max_position_embeddings = HfIntKey(r, "original_max_position_embeddings", cj.path);
  } else {
    TORCH_CHECK(false, cj.path, ": field ", field, ".", type_key, " = \"", type,
                "\" is not supported (implemented: default, linear, llama3)");
  }
}

void ReadAttentionVariant(const ConfigJson& cj, const std::string& arch, LlamaConfig& c) {
  const bool qwen = arch == "Qwen2ForCausalLM" || arch == "Qwen3ForCausalLM";
  if (arch == "Qwen2ForCausalLM") {
    c.qkv_bias = true;  // Qwen2's q/k/v always have biases, o_proj never
  } else if (arch == "MistralForCausalLM") {
    c.qkv_bias = c.o_bias = false;  // Mistral's projections never have biases (no attention_bias field)
  } else {
    c.qkv_bias = c.o_bias = cj.Bool("attention_bias", false);
  }
  c.qk_norm = arch == "Qwen3ForCausalLM";
  if (arch == "MistralForCausalLM" && cj.Has("sliding_window")) c.sliding_window = cj.Int("sliding_window");
  if (qwen) {
    cj.Refuse(cj.Bool("use_sliding_window", false), "use_sliding_window", "Qwen's per-layer sliding window");
    if (cj.Has("layer_types")) {
      for (const auto& t : cj.j["layer_types"]) {
        cj.Refuse(t != "full_attention", "layer_types", "only full_attention layers");
      }
    }
  }
  c.attention_dropout = cj.Double("attention_dropout", 0.0);
}

std::map<std::string, std::vector<int64_t>> ExpectedShapes(const LlamaConfig& c) {
  std::map<std::string, std::vector<int64_t>> out;
  const int64_t C = c.n_embd, hd = c.head_width(), q = c.n_head * hd, kv = c.kv_heads() * hd, m = c.mlp_width();
  out["embed_tokens.weight"] = {c.vocab_size, C};
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    out[p + "input_layernorm.weight"] = {C};
    out[p + "post_attention_layernorm.weight"] = {C};
    out[p + "self_attn.q_proj.weight"] = {q, C};
    out[p + "self_attn.k_proj.weight"] = {kv, C};
    out[p + "self_attn.v_proj.weight"] = {kv, C};
    out[p + "self_attn.o_proj.weight"] = {C, q};
    if (c.qkv_bias) {
      out[p + "self_attn.q_proj.bias"] = {q};
      out[p + "self_attn.k_proj.bias"] = {kv};
      out[p + "self_attn.v_proj.bias"] = {kv};
    }
    if (c.o_bias) out[p + "self_attn.o_proj.bias"] = {C};
    if (c.qk_norm) {
      out[p + "self_attn.q_norm.weight"] = {hd};
      out[p + "self_attn.k_norm.weight"] = {hd};
    }
    out[p + "mlp.gate_proj.weight"] = {m, C};
    out[p + "mlp.up_proj.weight"] = {m, C};
    out[p + "mlp.down_proj.weight"] = {C, m};
  }
  out["norm.weight"] = {C};
  if (!c.tie_word_embeddings) out["lm_head.weight"] = {c.vocab_size, C};
  return out;
}

}  // namespace

bool IsHfLlamaArchitecture(const std::string& architecture) {
  for (const char* a : kArchitectures) {
    if (architecture == a) return true;
  }
  return false;
}

std::string ReadHfArchitecture(const std::string& folder) {
  const fs::path path = fs::path(folder) / "config.json";
  if (!fs::is_regular_file(path)) return "";
  const nlohmann::json j = ReadHfJson(path.string());
  if (!j.is_object() || !j.contains("architectures") || !j["architectures"].is_array() ||
      j["architectures"].empty() || !j["architectures"][0].is_string()) {
    return "";
  }
  return j["architectures"][0].get<std::string>();
}

LlamaConfig ReadHfLlamaConfig(const std::string& folder) {
  TORCH_CHECK(fs::is_directory(folder), folder, ": not a folder (an HF model folder holds config.json and the weights)");
  const std::string path = (fs::path(folder) / "config.json").string();
  const nlohmann::json j = ReadHfJson(path);
  TORCH_CHECK(j.is_object(), path, ": not a JSON object");
  const ConfigJson cj{j, path};
  TORCH_CHECK(j.contains("architectures") && j["architectures"].is_array() && j["architectures"].size() == 1,
              path, ": field architectures = ", j.value("architectures", nlohmann::json()).dump(),
              " must name one architecture (LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, MistralForCausalLM)");
  const std::string arch = j["architectures"][0].is_string() ? j["architectures"][0].get<std::string>() : "";
  cj.Refuse(!IsHfLlamaArchitecture(arch), "architectures",
            "model.type llama reads LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, MistralForCausalLM");
  for (const char* moe : kMoeFields) {
    cj.Refuse(cj.Has(moe) && j[moe] != 0, moe, "mixture-of-experts layers");
  }
  cj.Refuse(cj.Has("quantization_config"), "quantization_config", "quantised weights");
  cj.Refuse(j.value("hidden_act", std::string("silu")) != "silu", "hidden_act", "the MLP is SwiGLU with silu");
  cj.Refuse(cj.Bool("mlp_bias", false), "mlp_bias", "the MLP projections have no biases");
  LlamaConfig c;
  c.n_layer = HfLayersKey(cj.j, "num_hidden_layers", cj.path);
  c.n_head = cj.Int("num_attention_heads");
  c.n_kv_head = cj.Has("num_key_value_heads") ? cj.Int("num_key_value_heads") : c.n_head;
  c.n_embd = cj.Int("hidden_size");
  c.head_dim = cj.Has("head_dim") ? cj.Int("head_dim") : 0;
  c.intermediate_size = cj.Int("intermediate_size");
  c.n_positions = cj.Int("max_position_embeddings");
  c.vocab_size = cj.Int("vocab_size");
  c.rms_norm_eps = cj.Double("rms_norm_eps", 1e-6);
  c.init_std = cj.Double("initializer_range", 0.02);
  c.tie_word_embeddings = cj.Bool("tie_word_embeddings", false);
  ReadRope(cj, c);
  ReadAttentionVariant(cj, arch, c);
  try {
    ValidateLlamaConfig(c);
  } catch (const c10::Error& e) {
    TORCH_CHECK(false, path, ": ", e.msg());
  }
  return c;
}

TensorMap MapHfLlamaWeights(const std::string& folder, const LlamaConfig& config) {
  HfWeightMapping m;
  m.expected = ExpectedShapes(config);
  m.ps_name = [](const std::string& hf) { return StartsWith(hf, "model.") ? hf.substr(6) : hf; };
  m.hf_name = [](const std::string& ps) { return ps == "lm_head.weight" ? ps : "model." + ps; };
  m.skip = [&config](const std::string& name) {
    return EndsWith(name, "rotary_emb.inv_freq") || (name == "lm_head.weight" && config.tie_word_embeddings);
  };
  m.model = "a Llama-family decoder with " + std::to_string(config.n_layer) + " layers" +
            (config.tie_word_embeddings ? ", tied head" : "") + (config.qkv_bias ? ", q/k/v biases" : "") +
            (config.qk_norm ? ", q/k norms" : "");
  return MapHfWeights(folder, m).params;
}

}  // namespace ps::models
