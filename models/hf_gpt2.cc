#include "models/hf_gpt2.h"

#include "models/hf_folder.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/autograd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

namespace ps::models {
namespace {

namespace fs = std::filesystem;

// HF Conv1D layers: weight stored [in, out].
bool IsConv1dWeight(const std::string& name) {
  return EndsWith(name, "attn.c_attn.weight") || EndsWith(name, "attn.c_proj.weight") ||
         EndsWith(name, "mlp.c_fc.weight") || EndsWith(name, "mlp.c_proj.weight");
}

// HF keys that are buffers, not weights: the causal mask of old checkpoints.
bool IsIgnorableBuffer(const std::string& name) {
  return EndsWith(name, "attn.bias") || EndsWith(name, "attn.masked_bias");
}

// "transformer.h.0.ln_1.weight" -> "h.0.ln_1.weight"; "lm_head.weight" unchanged.
std::string PsName(const std::string& hf_name) {
  return hf_name.rfind("transformer.", 0) == 0 ? hf_name.substr(12) : hf_name;
}

std::string HfName(const std::string& ps_name) {
  return ps_name == "lm_head.weight" ? ps_name : "transformer." + ps_name;
}

// The parameter names and shapes `config` builds, without building it.
std::map<std::string, std::vector<int64_t>> ExpectedShapes(const GptConfig& c) {
  std::map<std::string, std::vector<int64_t>> out;
  const int64_t e = c.n_embd;
  out["wte.weight"] = {c.vocab_size, e};
  out["wpe.weight"] = {c.n_positions, e};
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    for (const char* ln : {"ln_1", "ln_2"}) {
      out[h + ln + ".weight"] = {e};
      out[h + ln + ".bias"] = {e};
    }
    out[h + "attn.c_attn.weight"] = {3 * e, e};
    out[h + "attn.c_attn.bias"] = {3 * e};
    out[h + "attn.c_proj.weight"] = {e, e};
    out[h + "attn.c_proj.bias"] = {e};
    out[h + "mlp.c_fc.weight"] = {4 * e, e};
    out[h + "mlp.c_fc.bias"] = {4 * e};
    out[h + "mlp.c_proj.weight"] = {e, 4 * e};
    out[h + "mlp.c_proj.bias"] = {e};
  }
  out["ln_f.weight"] = {e};
  out["ln_f.bias"] = {e};
  if (!c.tie_word_embeddings) out["lm_head.weight"] = {c.vocab_size, e};
  return out;
}


}  // namespace

GptConfig ReadHfGpt2Config(const std::string& folder) {
  const std::string path = (fs::path(folder) / "config.json").string();
  TORCH_CHECK(fs::is_directory(folder), folder, ": not a folder (an HF model folder holds config.json and model.safetensors)");
  const nlohmann::json j = ReadHfJson(path);
  TORCH_CHECK(j.is_object(), path, ": not a JSON object");
  const std::string type = HfStringKey(j, "model_type", path, "");
  TORCH_CHECK(type == "gpt2", path, ": model_type '", type, "' is not gpt2 (this loader reads GPT-2 models)");
  GptConfig c;
  c.n_layer = HfLayersKey(j, "n_layer", path);
  c.n_head = HfIntKey(j, "n_head", path);
  c.n_embd = HfIntKey(j, "n_embd", path);
  c.n_positions = HfIntKey(j, "n_positions", path);
  c.vocab_size = HfIntKey(j, "vocab_size", path);
  c.layer_norm_eps = HfNumberKey(j, "layer_norm_epsilon", path, c.layer_norm_eps);
  c.tie_word_embeddings = HfBoolKey(j, "tie_word_embeddings", path, c.tie_word_embeddings);
  c.init_std = HfNumberKey(j, "initializer_range", path, c.init_std);
  const std::string act = HfStringKey(j, "activation_function", path, "gelu_new");
  TORCH_CHECK(act == "gelu_new" || act == "gelu_pytorch_tanh", path, ": activation_function '", act,
              "' is not supported (this GPT uses the tanh GELU, gelu_new)");
  if (j.contains("n_inner") && !j["n_inner"].is_null()) {
    TORCH_CHECK(HfIntKey(j, "n_inner", path) == 4 * c.n_embd, path, ": n_inner ", j["n_inner"].dump(),
                " is not 4 x n_embd = ", 4 * c.n_embd, " (the only MLP width this GPT has)");
  }
  TORCH_CHECK(!HfBoolKey(j, "scale_attn_by_inverse_layer_idx", path, false), path,
              ": scale_attn_by_inverse_layer_idx true is not supported");
  TORCH_CHECK(HfBoolKey(j, "scale_attn_weights", path, true), path, ": scale_attn_weights false is not supported");
  return c;
}

int64_t ReadHfEosTokenId(const std::string& folder) {
  const nlohmann::json j = ReadHfJson((fs::path(folder) / "config.json").string());
  return j.contains("eos_token_id") && j["eos_token_id"].is_number_integer() ? j["eos_token_id"].get<int64_t>() : -1;
}

TensorMap MapHfGpt2Weights(const std::string& folder, const GptConfig& config) {
  HfWeightMapping m;
  m.expected = ExpectedShapes(config);
  m.ps_name = PsName;
  m.hf_name = HfName;
  m.skip = [&config](const std::string& name) {
    return IsIgnorableBuffer(name) || (name == "lm_head.weight" && config.tie_word_embeddings);
  };
  m.to_ps_layout = [](const std::string& name, const at::Tensor& t) {
    return IsConv1dWeight(name) && t.dim() == 2 ? t.t() : t;
  };
  m.layout_note = [](const std::string& name) {
    return IsConv1dWeight(name) ? std::string(" after transposing (HF Conv1D stores [in, out])") : std::string();
  };
  m.model = "a GPT-2 with " + std::to_string(config.n_layer) + " layers" +
            (config.tie_word_embeddings ? ", tied head" : "");
  return MapHfWeights(folder, m).params;
}

void LoadHfGpt2(Gpt& model, const std::map<std::string, at::Tensor>& hf_state) {
  std::map<std::string, at::Tensor> state;
  for (const auto& [key, value] : hf_state) state[PsName(key)] = value;
  torch::NoGradGuard no_grad;
  std::set<std::string> used;
  for (const auto& p : model->BlockParameters()) {
    auto it = state.find(p.name);
    TORCH_CHECK(it != state.end(), "HF GPT-2 weights: missing '", p.name, "'");
    auto src = IsConv1dWeight(p.name) ? it->second.t() : it->second;
    TORCH_CHECK(src.sizes() == p.tensor.sizes(), "HF GPT-2 weights: '", p.name, "' has shape ",
                it->second.sizes(), ", model expects ", p.tensor.sizes(),
                IsConv1dWeight(p.name) ? " (transposed, Conv1D)" : "");
    p.tensor.copy_(src);
    used.insert(p.name);
  }
  for (const auto& [name, value] : state) {
    if (used.count(name) || IsIgnorableBuffer(name)) continue;
    if (name == "lm_head.weight" && model->config().tie_word_embeddings) continue;
    TORCH_CHECK(false, "HF GPT-2 weights: unexpected key '", name, "'");
  }
}

TensorMap ToHfGpt2StateDict(const TensorMap& params, const GptConfig& config) {
  const auto expected = ExpectedShapes(config);
  TensorMap out;
  for (const auto& [name, shape] : expected) {
    auto it = params.find(name);
    TORCH_CHECK(it != params.end(), "HF export: parameter '", name, "' is missing");
    TORCH_CHECK(it->second.sizes().vec() == shape, "HF export: parameter '", name, "' has shape ", it->second.sizes(),
                ", the config says ", c10::IntArrayRef(shape));
    at::Tensor t = it->second.detach().to(at::kCPU, at::kFloat);
    if (IsConv1dWeight(name)) t = t.t();
    out.emplace(HfName(name), t.contiguous());
  }
  for (const auto& [name, t] : params) {
    TORCH_CHECK(expected.count(name), "HF export: parameter '", name, "' is not part of a GPT-2");
  }
  return out;
}

std::vector<std::string> WriteHfGpt2Weights(const std::string& folder, const TensorMap& params,
                                            const GptConfig& config, const HfExportOptions& options) {
  TORCH_CHECK(fs::is_directory(folder), folder, ": export folder does not exist");
  nlohmann::json cj = {
      {"architectures", {"GPT2LMHeadModel"}},
      {"model_type", "gpt2"},
      {"activation_function", "gelu_new"},
      {"n_layer", config.n_layer},
      {"n_head", config.n_head},
      {"n_embd", config.n_embd},
      {"n_positions", config.n_positions},
      {"n_ctx", config.n_positions},
      {"n_inner", nullptr},
      {"vocab_size", config.vocab_size},
      {"layer_norm_epsilon", config.layer_norm_eps},
      {"initializer_range", config.init_std},
      {"resid_pdrop", config.dropout},
      {"embd_pdrop", config.dropout},
      {"attn_pdrop", config.dropout},
      {"scale_attn_weights", true},
      {"tie_word_embeddings", config.tie_word_embeddings},
      {"torch_dtype", HfDtypeName(options.dtype)},
      {"use_cache", true},
  };
  if (options.eos_token_id >= 0) {
    cj["bos_token_id"] = options.eos_token_id;
    cj["eos_token_id"] = options.eos_token_id;
  }
  std::vector<std::string> written;
  WriteHfJsonFile((fs::path(folder) / "config.json").string(), cj);
  written.push_back("config.json");

  for (const auto& f : SaveShardedSafetensors(folder, ToHfGpt2StateDict(params, config), options.max_shard_bytes, options.dtype)) {
    written.push_back(f);
  }
  return written;
}

}  // namespace ps::models
