#include <c10/util/Exception.h>

#include <yaml-cpp/yaml.h>

#include <exception>
#include <string>
#include <utility>

#include "data/data_error.h"
#include "data/format_inference.h"
#include "models/bert_config.h"
#include "models/hf_bert.h"
#include "models/hf_gpt2.h"
#include "trainer/config/config_loader.h"
#include "trainer/config/config_schema.h"
#include "trainer/config/config_steps.h"
#include "trainer/config/llama_keys.h"

namespace ps::trainer {
namespace {

// Resolve steps over one Config: what the keys set leave open.
class Resolver {
 public:
  Resolver(Config& config, KeyPlaces& places) : config_(config), places_(places) {}

  void ResolvePreset() {
    auto& m = config_.model;
    if (m.preset.empty()) return;
    const bool bert = config_.model_type == models::ModelType::kBert;
    // The preset's shape, from the zoo of this model.type.
    struct Shape {
      int64_t n_layer, n_head, n_embd, n_positions, vocab_size;
    };
    std::optional<Shape> preset;
    std::string names;
    if (bert) {
      if (auto p = models::FindBertPreset(m.preset)) preset = Shape{p->n_layer, p->n_head, p->n_embd, p->n_positions, p->vocab_size};
      for (const auto& p : models::BertPresets()) names += (names.empty() ? "" : ", ") + p.name;
    } else {
      if (auto p = models::FindGptPreset(m.preset)) preset = Shape{p->n_layer, p->n_head, p->n_embd, p->n_positions, p->vocab_size};
      for (const auto& p : models::GptPresets()) names += (names.empty() ? "" : ", ") + p.name;
    }
    if (!preset) {
      throw ConfigError(At("model.preset") + ": model.preset: unknown preset '" + m.preset + "'" +
                        (bert ? " for model.type bert" : "") + "; known: " + names);
    }
    // A shape key set as well must agree with the preset: otherwise the run would
    // train one shape while its config names another.
    auto fill = [&](const std::string& name, int64_t& field, int64_t value) {
      const std::string key = "model." + name;
      if (!places_.set_at.count(key)) {
        field = value;
      } else if (field != value) {
        throw ConfigError(At(key) + ": " + key + " " + std::to_string(field) + " disagrees with model.preset '" +
                          m.preset + "' (set at " + At("model.preset") + "), whose " + name + " is " +
                          std::to_string(value) + "; drop one of the two");
      }
    };
    fill("n_layer", m.n_layer, preset->n_layer);
    fill("n_head", m.n_head, preset->n_head);
    fill("n_embd", m.n_embd, preset->n_embd);
    fill("n_positions", m.n_positions, preset->n_positions);
    fill("vocab_size", m.vocab_size, preset->vocab_size);
  }

  // BERT's own defaults where they differ from GPT's (HF BertConfig's): LayerNorm eps
  // 1e-12 and dropout 0.1, unless set.
  void ApplyBertDefaults() {
    if (config_.model_type != models::ModelType::kBert) return;
    if (!places_.set_at.count("model.layer_norm_eps")) config_.model.layer_norm_eps = 1e-12;
    if (!places_.set_at.count("model.dropout")) config_.model.dropout = 0.1;
  }

  // model.init_from's config.json as GPT's shape keys; for BERT, its own config in `hf_bert`
  // too (tie_word_embeddings, not a BERT key, stays the config's). Errors name model.init_from.
  models::GptConfig ReadInitFromShape(bool bert, models::BertConfig* hf_bert) const {
    const auto& m = config_.model;
    models::GptConfig hf;
    try {
      if (!bert) return models::ReadHfGpt2Config(m.init_from);
      *hf_bert = models::ReadHfBertConfig(m.init_from);
    } catch (const c10::Error& e) {
      throw ConfigError(At("model.init_from") + ": model.init_from: " + e.what_without_backtrace());
    }
    hf.n_layer = hf_bert->n_layer;
    hf.n_head = hf_bert->n_head;
    hf.n_embd = hf_bert->n_embd;
    hf.n_positions = hf_bert->n_positions;
    hf.vocab_size = hf_bert->vocab_size;
    hf.layer_norm_eps = hf_bert->layer_norm_eps;
    hf.tie_word_embeddings = m.tie_word_embeddings;
    return hf;
  }

  // model.init_from: the HF folder's config.json gives the shape. Keys set in the config
  // (or by model.preset) must agree with it; those left unset take its values.
  void ResolveInitFrom() {
    auto& m = config_.model;
    if (m.init_from.empty()) return;
    const bool bert = config_.model_type == models::ModelType::kBert;
    models::BertConfig hf_bert;
    const models::GptConfig hf = ReadInitFromShape(bert, &hf_bert);
    // Set in the config, or (the five shape keys) filled by model.preset.
    const bool preset_shape = !m.preset.empty();
    auto given = [&](const std::string& key) {
      const bool shape_key = key != "model.layer_norm_eps" && key != "model.tie_word_embeddings";
      return places_.set_at.count(key) > 0 || (preset_shape && shape_key);
    };
    auto disagree = [&](const std::string& key, const std::string& ours, const std::string& theirs) {
      const std::string by = places_.set_at.count(key) ? At(key) : At("model.preset") + " (model.preset '" + m.preset + "')";
      throw ConfigError(by + ": " + key + " " + ours + " disagrees with model.init_from '" + m.init_from +
                        "', whose config.json says " + theirs + "; drop the key or use another folder");
    };
    auto fill = [&](const std::string& name, int64_t& field, int64_t value) {
      const std::string key = "model." + name;
      if (!given(key)) {
        field = value;
      } else if (field != value) {
        disagree(key, std::to_string(field), std::to_string(value));
      }
    };
    fill("n_layer", m.n_layer, hf.n_layer);
    fill("n_head", m.n_head, hf.n_head);
    fill("n_embd", m.n_embd, hf.n_embd);
    fill("n_positions", m.n_positions, hf.n_positions);
    fill("vocab_size", m.vocab_size, hf.vocab_size);
    if (bert) {  // no preset sets these: only the config can disagree
      auto fill_bert = [&](const std::string& key, int64_t& field, int64_t value) {
        if (!places_.set_at.count(key)) {
          field = value;
        } else if (field != value) {
          disagree(key, std::to_string(field), std::to_string(value));
        }
      };
      fill_bert("model.intermediate_size", config_.bert.intermediate_size, hf_bert.mlp_width());
      fill_bert("model.type_vocab_size", config_.bert.type_vocab_size, hf_bert.type_vocab_size);
    }
    if (!given("model.layer_norm_eps")) {
      m.layer_norm_eps = hf.layer_norm_eps;
    } else if (m.layer_norm_eps != hf.layer_norm_eps) {
      disagree("model.layer_norm_eps", std::to_string(m.layer_norm_eps), std::to_string(hf.layer_norm_eps));
    }
    if (!given("model.tie_word_embeddings")) {
      m.tie_word_embeddings = hf.tie_word_embeddings;
    } else if (m.tie_word_embeddings != hf.tie_word_embeddings) {
      disagree("model.tie_word_embeddings", m.tie_word_embeddings ? "true" : "false",
               hf.tie_word_embeddings ? "true" : "false");
    }
  }

  // model.type llama: the preset's, then model.init_from's keys (llama_keys.h).
  void ResolveLlama() {
    ResolveLlamaKeys(config_, [this](const std::string& key) { return places_.set_at.count(key) > 0; },
                     [this](const std::string& key) { return At(key); });
  }

  // data.format: synthetic reads no file, so a path beside it is a contradiction; auto (not given) is inferred
  // from data.train_path (data/format_inference.h) and must agree with data.valid_path's; no format and no path
  // is an error: random tokens must be asked for. Reads the heads of the data files.
  void ResolveDataFormat() {
    auto& d = config_.data;
    if (d.format == data::DataFormat::kSynthetic) {
      for (const auto& [key, path] : {std::pair<std::string, std::string>{"data.train_path", d.train_path},
                                      {"data.valid_path", d.valid_path}}) {
        if (path.empty()) continue;
        throw ConfigError(At(key) + ": " + key + " '" + path + "' is set but data.format is synthetic (random " +
                          "tokens; no file is read): remove the path, or set data.format to the file's format " +
                          "(or leave data.format out to infer it)");
      }
      return;
    }
    if (d.format != data::DataFormat::kAuto) return;
    if (d.train_path.empty()) {
      const std::string where = places_.set_at.count("data.valid_path") ? At("data.valid_path") : places_.source;
      throw ConfigError(where + ": no training data: data.train_path and data.format are not set; set data.train_path " +
                        "(data.format is inferred from the file), or data.format: synthetic to train on random tokens");
    }
    const auto infer = [&](const std::string& key, const std::string& path) {
      try {
        return data::InferDataFormat(path, key);
      } catch (const data::DataError& e) {
        throw ConfigError(At(key) + ": " + e.what());
      }
    };
    const data::DataFormat train = infer("data.train_path", d.train_path);
    if (!d.valid_path.empty()) {
      const data::DataFormat valid = infer("data.valid_path", d.valid_path);
      if (valid != train) {
        throw ConfigError(At("data.valid_path") + ": data.valid_path '" + d.valid_path + "' looks like data.format " +
                          data::ToString(valid) + " but data.train_path '" + d.train_path + "' like " +
                          data::ToString(train) + "; set data.format");
      }
    }
    const bool classifier = config_.model_type == models::ModelType::kBert && config_.bert.num_labels > 0;
    if (train == data::DataFormat::kClassification && !classifier) {
      throw ConfigError(At("data.train_path") + ": data.train_path '" + d.train_path + "' holds JSON lines or " +
                        "TSV, not tokens: tokenize it with ps_prep (docs/data.md), or set data.format: text to " +
                        "train on its bytes (labelled examples are data.format classification, for model.type bert " +
                        "with model.num_labels)");
    }
    // Text is read as bytes (ids 0-255): nonsense to a model with a tokenizer of its own.
    const auto& m = config_.model;
    const std::string tokenizer = !d.tokenizer.empty() ? "data.tokenizer '" + d.tokenizer + "'"
                                  : !m.init_from.empty() ? "model.init_from '" + m.init_from + "'" : "";
    if (train == data::DataFormat::kText && !tokenizer.empty() && m.vocab_size > 256) {
      throw ConfigError(At("data.train_path") + ": data.train_path '" + d.train_path + "' is text, which " +
                        "data.format text reads as bytes (ids 0-255), but this model has a tokenizer (" + tokenizer +
                        "): tokenize the text with ps_prep (docs/data.md), or set data.format: text to train on its " +
                        "bytes all the same");
    }
    d.format = train;
    places_.set_at["data.format"] = At("data.train_path") + " (data.format inferred from data.train_path)";
  }

 private:
  std::string At(const std::string& key) const { return places_.At(key); }

  Config& config_;
  KeyPlaces& places_;
};

}  // namespace

std::string KeyPlaces::At(const std::string& key) const {
  const auto it = set_at.find(key);
  return it == set_at.end() ? std::string("config") : it->second;
}

namespace {

// The model keys model.init_from's config.json filled bypassed the schema's checks at
// parse time (a head count of 0 divides by zero later; a billion layers exhausts memory
// building their shapes): each model.* key is checked again by its field's own setter.
void CheckInitFromKeys(const Config& config, const KeyPlaces& places) {
  if (config.model.init_from.empty()) return;
  Config scratch = config;
  for (const FieldSpec& field : BuildConfigSchema()) {
    if (field.key.rfind("model.", 0) != 0 || places.set_at.count(field.key) > 0) continue;
    const std::string value = field.get(config);
    try {
      field.set(scratch, YAML::Load(value));
    } catch (const std::exception& e) {
      throw ConfigError(places.At("model.init_from") + ": model.init_from '" + config.model.init_from +
                        "': its config.json gives " + field.key + " " + value + ", which " + e.what());
    }
  }
}

}  // namespace

void ResolveModel(Config& config, KeyPlaces& places) {
  Resolver r(config, places);
  if (config.model_type == models::ModelType::kLlama) {
    r.ResolveLlama();
  } else {
    r.ResolvePreset();
    r.ApplyBertDefaults();
    r.ResolveInitFrom();
  }
  CheckInitFromKeys(config, places);
}

void ResolveDataFormat(Config& config, KeyPlaces& places) { Resolver(config, places).ResolveDataFormat(); }

}  // namespace ps::trainer
