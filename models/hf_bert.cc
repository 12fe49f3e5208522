#include "models/hf_bert.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "models/bert.h"
#include "models/hf_folder.h"

namespace ps::models {
namespace {

namespace fs = std::filesystem;

// HF key -> ps name: no "bert." prefix; old TF-port LayerNorm names gamma/beta.
std::string PsName(const std::string& hf) {
  std::string name = StartsWith(hf, "bert.") ? hf.substr(5) : hf;
  if (EndsWith(name, "LayerNorm.gamma")) name = name.substr(0, name.size() - 5) + "weight";
  if (EndsWith(name, "LayerNorm.beta")) name = name.substr(0, name.size() - 4) + "bias";
  return name;
}

std::string HfName(const std::string& ps) {
  const bool top = StartsWith(ps, "cls.") || StartsWith(ps, "classifier.");
  return top ? ps : "bert." + ps;
}

// Keys that are not parameters of any BERT: buffers, and the decoder tied to the word
// embeddings (its bias is cls.predictions.bias).
bool Ignorable(const std::string& name) {
  return EndsWith(name, "position_ids") || name == "cls.predictions.decoder.weight" ||
         name == "cls.predictions.decoder.bias";
}

// Parameters of a head (they may be absent from a folder trained with another head).
bool IsHead(const std::string& name) {
  return StartsWith(name, "cls.") || StartsWith(name, "classifier.") || StartsWith(name, "pooler.");
}

// The names and shapes of `config`'s parameters, from a model built on the meta device
// would be simplest; a tiny real model costs too much for bert-large, so they are listed.
std::map<std::string, std::vector<int64_t>> ExpectedShapes(const BertConfig& c) {
  std::map<std::string, std::vector<int64_t>> out;
  const int64_t e = c.n_embd, m = c.mlp_width();
  out["embeddings.word_embeddings.weight"] = {c.vocab_size, e};
  out["embeddings.position_embeddings.weight"] = {c.n_positions, e};
  out["embeddings.token_type_embeddings.weight"] = {c.type_vocab_size, e};
  out["embeddings.LayerNorm.weight"] = {e};
  out["embeddings.LayerNorm.bias"] = {e};
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const std::string p = "encoder.layer." + std::to_string(l) + ".";
    for (const char* n : {"attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense"}) {
      out[p + n + ".weight"] = {e, e};
      out[p + n + ".bias"] = {e};
    }
    for (const char* n : {"attention.output.LayerNorm", "output.LayerNorm"}) {
      out[p + n + ".weight"] = {e};
      out[p + n + ".bias"] = {e};
    }
    out[p + "intermediate.dense.weight"] = {m, e};
    out[p + "intermediate.dense.bias"] = {m};
    out[p + "output.dense.weight"] = {e, m};
    out[p + "output.dense.bias"] = {e};
  }
  if (c.has_pooler()) {
    out["pooler.dense.weight"] = {e, e};
    out["pooler.dense.bias"] = {e};
  }
  if (c.mlm_head) {
    out["cls.predictions.transform.dense.weight"] = {e, e};
    out["cls.predictions.transform.dense.bias"] = {e};
    out["cls.predictions.transform.LayerNorm.weight"] = {e};
    out["cls.predictions.transform.LayerNorm.bias"] = {e};
    out["cls.predictions.bias"] = {c.vocab_size};
  }
  if (c.nsp_head) {
    out["cls.seq_relationship.weight"] = {2, e};
    out["cls.seq_relationship.bias"] = {2};
  }
  if (c.num_labels > 0) {
    out["classifier.weight"] = {c.num_labels, e};
    out["classifier.bias"] = {c.num_labels};
  }
  return out;
}

}  // namespace

BertConfig ReadHfBertConfig(const std::string& folder) {
  TORCH_CHECK(fs::is_directory(folder), folder, ": not a folder (an HF model folder holds config.json and model.safetensors)");
  const std::string path = (fs::path(folder) / "config.json").string();
  const nlohmann::json j = ReadHfJson(path);
  TORCH_CHECK(j.is_object(), path, ": not a JSON object");
  const std::string type = HfStringKey(j, "model_type", path, "");
  TORCH_CHECK(type == "bert", path, ": model_type '", type, "' is not bert");
  BertConfig c;
  c.n_layer = HfLayersKey(j, "num_hidden_layers", path);
  c.n_head = HfIntKey(j, "num_attention_heads", path);
  c.n_embd = HfIntKey(j, "hidden_size", path);
  c.intermediate_size = HfIntKey(j, "intermediate_size", path);
  c.n_positions = HfIntKey(j, "max_position_embeddings", path);
  c.vocab_size = HfIntKey(j, "vocab_size", path);
  c.type_vocab_size = HfIntKey(j, "type_vocab_size", path, 2);
  c.layer_norm_eps = HfNumberKey(j, "layer_norm_eps", path, 1e-12);
  c.dropout = HfNumberKey(j, "hidden_dropout_prob", path, 0.1);
  c.attention_dropout = HfNumberKey(j, "attention_probs_dropout_prob", path, 0.1);
  c.init_std = HfNumberKey(j, "initializer_range", path, 0.02);
  const std::string act = HfStringKey(j, "hidden_act", path, "gelu");
  TORCH_CHECK(act == "gelu", path, ": hidden_act '", act, "' is not supported (this BERT uses the erf GELU, gelu)");
  const std::string pos = HfStringKey(j, "position_embedding_type", path, "absolute");
  TORCH_CHECK(pos == "absolute", path, ": position_embedding_type '", pos, "' is not supported (absolute only)");
  std::string arch;
  if (j.contains("architectures") && j["architectures"].is_array() && !j["architectures"].empty()) {
    TORCH_CHECK(j["architectures"][0].is_string(), path, ": key 'architectures' is ", j["architectures"].dump(),
                ", not a list of names");
    arch = j["architectures"][0].get<std::string>();
  }
  c.mlm_head = arch == "BertForMaskedLM" || arch == "BertForPreTraining" || arch.empty() || arch == "BertModel";
  c.nsp_head = arch == "BertForPreTraining";
  if (arch == "BertForSequenceClassification") {
    c.mlm_head = false;
    c.num_labels = j.contains("id2label") && j["id2label"].is_object() ? static_cast<int64_t>(j["id2label"].size())
                                                                       : HfIntKey(j, "num_labels", path, 2);
  }
  return c;
}

HfBertWeights MapHfBertWeights(const std::string& folder, const BertConfig& config) {
  HfWeightMapping m;
  m.expected = ExpectedShapes(config);
  m.ps_name = PsName;
  m.hf_name = HfName;
  // Buffers and the tied decoder, and another head than this config's (e.g. MLM weights
  // when starting a classifier).
  m.skip = [](const std::string& name) { return Ignorable(name) || IsHead(name); };
  m.may_be_missing = IsHead;
  m.model = "a BERT with " + std::to_string(config.n_layer) + " layers";
  HfMappedWeights mapped = MapHfWeights(folder, m);
  return {std::move(mapped.params), std::move(mapped.missing)};
}

std::vector<std::string> WriteHfBertWeights(const std::string& folder, const TensorMap& params,
                                            const BertConfig& config, const HfExportOptions& options) {
  TORCH_CHECK(fs::is_directory(folder), folder, ": export folder does not exist");
  std::string arch = "BertModel";
  if (config.num_labels > 0) {
    arch = "BertForSequenceClassification";
  } else if (config.mlm_head && config.nsp_head) {
    arch = "BertForPreTraining";
  } else if (config.mlm_head) {
    arch = "BertForMaskedLM";
  }
  nlohmann::json cj = {
      {"architectures", {arch}},
      {"model_type", "bert"},
      {"hidden_act", "gelu"},
      {"num_hidden_layers", config.n_layer},
      {"num_attention_heads", config.n_head},
      {"hidden_size", config.n_embd},
      {"intermediate_size", config.mlp_width()},
      {"max_position_embeddings", config.n_positions},
      {"vocab_size", config.vocab_size},
      {"type_vocab_size", config.type_vocab_size},
      {"layer_norm_eps", config.layer_norm_eps},
      {"hidden_dropout_prob", config.dropout},
      {"attention_probs_dropout_prob", config.attention_dropout},
      {"initializer_range", config.init_std},
      {"position_embedding_type", "absolute"},
      {"pad_token_id", 0},
      {"torch_dtype", HfDtypeName(options.dtype)},
  };
  if (config.num_labels > 0) {
    nlohmann::json id2label = nlohmann::json::object(), label2id = nlohmann::json::object();
    for (int64_t i = 0; i < config.num_labels; ++i) {
      id2label[std::to_string(i)] = "LABEL_" + std::to_string(i);
      label2id["LABEL_" + std::to_string(i)] = i;
    }
    cj["id2label"] = id2label;
    cj["label2id"] = label2id;
  }
  const std::string config_path = (fs::path(folder) / "config.json").string();
  WriteHfJsonFile(config_path, cj);
  std::vector<std::string> written = {"config.json"};
  const auto expected = ExpectedShapes(config);
  TensorMap hf;
  for (const auto& [name, shape] : expected) {
    auto it = params.find(name);
    TORCH_CHECK(it != params.end(), "HF export: parameter '", name, "' is missing");
    TORCH_CHECK(it->second.sizes().vec() == shape, "HF export: parameter '", name, "' has shape ", it->second.sizes(),
                ", the config says ", c10::IntArrayRef(shape));
    hf.emplace(HfName(name), it->second.detach().to(at::kCPU, at::kFloat).contiguous());
  }
  for (const auto& [name, t] : params) {
    TORCH_CHECK(expected.count(name), "HF export: parameter '", name, "' is not part of this BERT");
  }
  for (const auto& f : SaveShardedSafetensors(folder, hf, options.max_shard_bytes, options.dtype)) written.push_back(f);
  return written;
}

}  // namespace ps::models
