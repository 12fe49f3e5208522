// The model.type: llama side of a Config: its models::LlamaConfig (the shared shape keys
// plus config.llama), and how a preset or an HF folder's config.json fills the keys a
// config leaves unset. Pure functions of a Config; the config steps (config_resolve.cc
// fills the keys, config_validate.cc checks them) and the model factory call them.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "models/llama_config.h"
#include "trainer/config/config.h"

namespace ps::trainer {

// The Llama of a model.type: llama config. model.layer_norm_eps is the RMSNorm epsilon,
// model.dropout the attention dropout, model.intermediate_size the SwiGLU width;
// model.attention_bias gives q/k/v and o biases, model.qkv_bias q/k/v ones only.
models::LlamaConfig LlamaConfigOf(const Config& config);

// The Llama-only keys (model.num_key_value_heads, head_dim, rope_*, attention_bias,
// qkv_bias, qk_norm, sliding_window) whose value differs from the default: a GPT or
// BERT config must not set them.
std::vector<std::string> ChangedLlamaKeys(const Config& config);

// Called with a key, `config`'s value and `source`'s value (as text) where they differ.
using KeyDisagreement = std::function<void(const std::string& key, const std::string& ours, const std::string& theirs)>;

// Fills every model.* key that a Llama shape has (the five shape keys, layer_norm_eps,
// tie_word_embeddings, intermediate_size and the Llama-only keys) from `source`, where
// `given(key)` is false; where it is true and the values differ, calls `disagree` (which
// is expected to throw). Head counts, head width and MLP width compare as effective
// values (0 = derived).
void FillLlamaKeys(const models::LlamaConfig& source, Config& config,
                   const std::function<bool(const std::string&)>& given, const KeyDisagreement& disagree);

// model.type llama: model.preset fills the keys left unset (those set must agree), then
// model.init_from's config.json fills the rest (set or preset keys must agree). Throws
// ConfigError for an unknown preset, a disagreement, or an unsupported config.json
// (another architecture, a rope type such as yarn, ...), naming the file, the field and
// the value. `is_set(key)`: the config file or an override set it; `at(key)`: where
// ("file:line"), for messages.
void ResolveLlamaKeys(Config& config, const std::function<bool(const std::string&)>& is_set,
                      const std::function<std::string(const std::string&)>& at);

// "llama-3.2-1b, llama-3.2-3b, ...": the names model.preset accepts for model.type llama.
std::string LlamaPresetNames();

}  // namespace ps::trainer
