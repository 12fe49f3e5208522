#include "models/hf_gpt2.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/autograd.h>

#include <set>

namespace ps::models {
namespace {

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// HF Conv1D layers: weight stored [in, out].
bool IsConv1dWeight(const std::string& name) {
  return EndsWith(name, "attn.c_attn.weight") || EndsWith(name, "attn.c_proj.weight") ||
         EndsWith(name, "mlp.c_fc.weight") || EndsWith(name, "mlp.c_proj.weight");
}

}  // namespace

void LoadHfGpt2(Gpt& model, const std::map<std::string, at::Tensor>& hf_state) {
  std::map<std::string, at::Tensor> state;
  for (const auto& [key, value] : hf_state) {
    std::string name = key.rfind("transformer.", 0) == 0 ? key.substr(12) : key;
    state[name] = value;
  }
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
    if (used.count(name) || EndsWith(name, "attn.bias") || EndsWith(name, "attn.masked_bias")) {
      continue;
    }
    if (name == "lm_head.weight" && model->config().tie_word_embeddings) continue;
    TORCH_CHECK(false, "HF GPT-2 weights: unexpected key '", name, "'");
  }
}

}  // namespace ps::models
