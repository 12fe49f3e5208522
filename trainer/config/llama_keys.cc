#include "trainer/config/llama_keys.h"

#include <c10/util/Exception.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "models/hf_llama.h"
#include "trainer/config/config_loader.h"

namespace ps::trainer {
namespace {

std::string Text(int64_t v) { return std::to_string(v); }
std::string Text(bool v) { return v ? "true" : "false"; }
std::string Text(double v) {
  std::ostringstream out;
  out.precision(17);
  out << v;
  return out.str();
}
std::string Text(models::RopeScalingType v) { return models::ToString(v); }

// One key's fill-or-compare, for any value type with a Text().
class Filler {
 public:
  Filler(const std::function<bool(const std::string&)>& given, const KeyDisagreement& disagree)
      : given_(given), disagree_(disagree) {}

  template <typename T>
  void operator()(const std::string& key, T& field, const T& value) const {
    if (!given_(key)) {
      field = value;
    } else if (field != value) {
      disagree_(key, Text(field), Text(value));
    }
  }

 private:
  const std::function<bool(const std::string&)>& given_;
  const KeyDisagreement& disagree_;
};

}  // namespace

models::LlamaConfig LlamaConfigOf(const Config& c) {
  models::LlamaConfig l;
  l.n_layer = c.model.n_layer;
  l.n_head = c.model.n_head;
  l.n_kv_head = c.llama.num_key_value_heads;
  l.n_embd = c.model.n_embd;
  l.head_dim = c.llama.head_dim;
  l.intermediate_size = c.bert.intermediate_size;
  l.n_positions = c.model.n_positions;
  l.vocab_size = c.model.vocab_size;
  l.rms_norm_eps = c.model.layer_norm_eps;
  l.rope_theta = c.llama.rope_theta;
  l.rope_scaling = c.llama.rope_scaling;
  l.qkv_bias = c.llama.qkv_bias || c.llama.attention_bias;
  l.o_bias = c.llama.attention_bias;
  l.qk_norm = c.llama.qk_norm;
  l.sliding_window = c.llama.sliding_window;
  l.attention_dropout = c.model.dropout;
  l.init_std = c.model.init_std;
  l.tie_word_embeddings = c.model.tie_word_embeddings;
  l.activation_checkpointing = c.model.activation_checkpointing;
  l.loss_slice_tokens = c.model.loss_slice_tokens;
  return l;
}

std::vector<std::string> ChangedLlamaKeys(const Config& c) {
  const models::LlamaKeys d;
  const models::LlamaKeys& k = c.llama;
  const std::pair<const char*, bool> keys[] = {
      {"model.num_key_value_heads", k.num_key_value_heads != d.num_key_value_heads},
      {"model.head_dim", k.head_dim != d.head_dim},
      {"model.rope_theta", k.rope_theta != d.rope_theta},
      {"model.rope_scaling.type", k.rope_scaling.type != d.rope_scaling.type},
      {"model.rope_scaling.factor", k.rope_scaling.factor != d.rope_scaling.factor},
      {"model.rope_scaling.low_freq_factor", k.rope_scaling.low_freq_factor != d.rope_scaling.low_freq_factor},
      {"model.rope_scaling.high_freq_factor", k.rope_scaling.high_freq_factor != d.rope_scaling.high_freq_factor},
      {"model.rope_scaling.original_max_position_embeddings",
       k.rope_scaling.original_max_position_embeddings != d.rope_scaling.original_max_position_embeddings},
      {"model.attention_bias", k.attention_bias != d.attention_bias},
      {"model.qkv_bias", k.qkv_bias != d.qkv_bias},
      {"model.qk_norm", k.qk_norm != d.qk_norm},
      {"model.sliding_window", k.sliding_window != d.sliding_window}};
  std::vector<std::string> out;
  for (const auto& [key, changed] : keys) {
    if (changed) out.push_back(key);
  }
  return out;
}

void FillLlamaKeys(const models::LlamaConfig& s, Config& c, const std::function<bool(const std::string&)>& given,
                   const KeyDisagreement& disagree) {
  const Filler fill(given, disagree);
  auto& m = c.model;
  auto& k = c.llama;
  fill("model.n_layer", m.n_layer, s.n_layer);
  fill("model.n_head", m.n_head, s.n_head);
  fill("model.n_embd", m.n_embd, s.n_embd);
  fill("model.n_positions", m.n_positions, s.n_positions);
  fill("model.vocab_size", m.vocab_size, s.vocab_size);
  fill("model.layer_norm_eps", m.layer_norm_eps, s.rms_norm_eps);
  fill("model.tie_word_embeddings", m.tie_word_embeddings, s.tie_word_embeddings);
  // Effective values: a config's 0 (derived) equals the folder's explicit width.
  const models::LlamaConfig ours = LlamaConfigOf(c);
  if (given("model.intermediate_size")) c.bert.intermediate_size = ours.mlp_width();
  fill("model.intermediate_size", c.bert.intermediate_size, s.mlp_width());
  if (given("model.num_key_value_heads")) k.num_key_value_heads = ours.kv_heads();
  fill("model.num_key_value_heads", k.num_key_value_heads, s.kv_heads());
  if (given("model.head_dim")) k.head_dim = ours.head_width();
  fill("model.head_dim", k.head_dim, s.head_width());
  fill("model.rope_theta", k.rope_theta, s.rope_theta);
  fill("model.rope_scaling.type", k.rope_scaling.type, s.rope_scaling.type);
  fill("model.rope_scaling.factor", k.rope_scaling.factor, s.rope_scaling.factor);
  fill("model.rope_scaling.low_freq_factor", k.rope_scaling.low_freq_factor, s.rope_scaling.low_freq_factor);
  fill("model.rope_scaling.high_freq_factor", k.rope_scaling.high_freq_factor, s.rope_scaling.high_freq_factor);
  fill("model.rope_scaling.original_max_position_embeddings", k.rope_scaling.original_max_position_embeddings,
       s.rope_scaling.original_max_position_embeddings);
  fill("model.attention_bias", k.attention_bias, s.o_bias);
  fill("model.qkv_bias", k.qkv_bias, s.qkv_bias && !s.o_bias);
  fill("model.qk_norm", k.qk_norm, s.qk_norm);
  fill("model.sliding_window", k.sliding_window, s.sliding_window);
}

std::string LlamaPresetNames() {
  std::string names;
  for (const auto& p : models::LlamaPresets()) names += (names.empty() ? "" : ", ") + p.name;
  return names;
}

void ResolveLlamaKeys(Config& config, const std::function<bool(const std::string&)>& is_set,
                      const std::function<std::string(const std::string&)>& at) {
  const auto& m = config.model;
  if (!m.preset.empty()) {
    const auto preset = models::FindLlamaPreset(m.preset);
    if (!preset) {
      throw ConfigError(at("model.preset") + ": model.preset: unknown preset '" + m.preset +
                        "' for model.type llama; known: " + LlamaPresetNames());
    }
    FillLlamaKeys(preset->config, config, is_set, [&](const std::string& key, const std::string& ours,
                                                       const std::string& theirs) {
      throw ConfigError(at(key) + ": " + key + " " + ours + " disagrees with model.preset '" + m.preset +
                        "' (set at " + at("model.preset") + "), whose value is " + theirs + "; drop one of the two");
    });
  }
  if (m.init_from.empty()) return;
  models::LlamaConfig hf;
  try {
    hf = models::ReadHfLlamaConfig(m.init_from);
  } catch (const c10::Error& e) {
    throw ConfigError(at("model.init_from") + ": model.init_from: " + e.what_without_backtrace());
  } catch (const nlohmann::json::exception& e) {  // a field of the wrong JSON type
    throw ConfigError(at("model.init_from") + ": model.init_from: " + m.init_from + "/config.json: " + e.what());
  }
  auto given = [&](const std::string& key) { return is_set(key) || !m.preset.empty(); };
  FillLlamaKeys(hf, config, given, [&](const std::string& key, const std::string& ours, const std::string& theirs) {
    const std::string by = is_set(key) ? at(key) : at("model.preset") + " (model.preset '" + m.preset + "')";
    throw ConfigError(by + ": " + key + " " + ours + " disagrees with model.init_from '" + m.init_from +
                      "', whose config.json says " + theirs + "; drop the key or use another folder");
  });
}

}  // namespace ps::trainer
