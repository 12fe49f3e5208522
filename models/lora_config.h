// LoraConfig: the lora.* keys: which Linear layers of a model get
// low-rank adapters, their rank and scale, and where their first values come from.
// Plain data; models/lora.h attaches the adapters and computes with them.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace ps::models {

struct LoraConfig {
  bool enabled = false;
  int64_t r = 8;          // the adapters' rank
  double alpha = 16.0;    // scale = alpha / r (alpha / sqrt(r) with use_rslora)
  double dropout = 0.0;   // on the adapter's input, in training only
  // Module names as HF's (the last part of the module path: "q_proj", "c_attn");
  // empty = PEFT's default for the family (DefaultLoraTargets).
  std::vector<std::string> target_modules;
  bool use_rslora = false;
  // A PEFT adapter folder (adapter_config.json + adapter_model.safetensors) whose
  // weights the adapters start from; empty = PEFT's initialisation from the run seed.
  std::string init_from;
};

// The module names of the Linear layers a family offers for adapters (what
// lora.target_modules may name; AttachLora finds the same in the built model:
// tests/models/lora_test.cc): its blocks' ("gpt2", "bert"; else the Llama family's), and
// for BERT also the pooler's and the MLM head's "dense", as PEFT matches them.
inline std::vector<std::string> LoraModuleNames(const std::string& family) {
  if (family == "gpt2") return {"c_attn", "c_fc", "c_proj"};
  if (family == "bert") return {"dense", "key", "query", "value"};
  return {"down_proj", "gate_proj", "k_proj", "o_proj", "q_proj", "up_proj", "v_proj"};
}

// PEFT's default target modules of a model family ("gpt2", "bert"; else the Llama family's).
inline std::vector<std::string> DefaultLoraTargets(const std::string& family) {
  if (family == "gpt2") return {"c_attn"};
  if (family == "bert") return {"query", "value"};
  return {"q_proj", "v_proj"};  // llama, qwen2, qwen3, mistral
}

// The adapters' scale: alpha / r, or alpha / sqrt(r) with use_rslora.
inline double LoraScale(const LoraConfig& c) {
  const double r = static_cast<double>(c.r);
  return c.use_rslora ? c.alpha / std::sqrt(r) : c.alpha / r;
}

// Whether parameter `name` is an adapter factor (".lora_A.weight" or ".lora_B.weight").
inline bool IsLoraParameter(const std::string& name) {
  for (const std::string tail : {".lora_A.weight", ".lora_B.weight"}) {
    if (name.size() >= tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0) return true;
  }
  return false;
}

}  // namespace ps::models
