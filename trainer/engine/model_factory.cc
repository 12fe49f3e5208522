#include "trainer/engine/model_factory.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <utility>

#include "models/lora_config.h"
#include "models/module_path.h"
#include "models/trainable_models.h"
#include "trainer/config/config_loader.h"

namespace ps::trainer {

namespace {

std::unique_ptr<models::TrainableModel> MakeBaseModel(const Config& c) {
  if (c.model_type == models::ModelType::kGpt) {
    return models::MakeTrainableGpt(models::Gpt(c.model, models::kUninitialised));
  }
  if (c.model_type == models::ModelType::kLlama) {
    return models::MakeTrainableLlama(models::Llama(LlamaConfigOf(c), models::kUninitialised));
  }
  const models::BertConfig b = BertConfigOf(c);
  if (b.num_labels > 0) return models::MakeTrainableBertClassifier(models::Bert(b, models::kUninitialised));
  return models::MakeTrainableBertMlm(models::Bert(b, models::kUninitialised));
}

}  // namespace

std::unique_ptr<models::TrainableModel> MakeModel(const Config& c) {
  std::unique_ptr<models::TrainableModel> model = MakeBaseModel(c);
  if (c.lora.enabled) {
    try {
      model->AttachLora(c.lora);
    } catch (const c10::Error& e) {  // a target naming no module: the config's
      throw ConfigError(e.what_without_backtrace());
    }
  }
  return model;
}

namespace {

std::vector<models::ParameterShape> BaseShapesOf(const Config& c) {
  if (c.model_type == models::ModelType::kGpt) return models::GptParameterShapes(c.model);
  if (c.model_type == models::ModelType::kLlama) return models::LlamaParameterShapes(LlamaConfigOf(c));
  return models::BertParameterShapes(BertConfigOf(c));
}

// In and out features of an adaptable Linear `module` (its path), as the models build them.
std::pair<int64_t, int64_t> LinearFeatures(const Config& c, const std::string& module) {
  const std::string leaf = models::ModuleName(module);
  const int64_t C = c.model.n_embd;
  if (c.model_type == models::ModelType::kBert) {
    const int64_t m = BertConfigOf(c).mlp_width();
    if (module.find(".intermediate.dense") != std::string::npos) return {C, m};
    if (module.find(".output.dense") != std::string::npos && module.find(".attention.") == std::string::npos) {
      return {m, C};
    }
    return {C, C};  // query, key, value, attention.output.dense, pooler.dense, the MLM transform
  }
  if (c.model_type == models::ModelType::kGpt) {
    if (leaf == "c_attn") return {C, 3 * C};
    if (leaf == "c_fc") return {C, 4 * C};
    return module.find(".mlp.") != std::string::npos ? std::pair<int64_t, int64_t>{4 * C, C} : std::pair{C, C};
  }
  const models::LlamaConfig l = LlamaConfigOf(c);
  const int64_t q = l.n_head * l.head_width(), kv = l.kv_heads() * l.head_width(), m = l.mlp_width();
  if (leaf == "q_proj") return {C, q};
  if (leaf == "k_proj" || leaf == "v_proj") return {C, kv};
  if (leaf == "o_proj") return {q, C};
  if (leaf == "down_proj") return {m, C};
  return {C, m};  // gate_proj, up_proj
}

// Whether `module` gets an adapter: an adaptable Linear (a block's; BERT's pooler and MLM
// transform) that lora.target_modules names.
bool Adapted(const Config& c, const std::string& module) {
  const std::string family = models::LoraFamilyOf(c.model_type);
  const bool bert_head = module == "pooler.dense" || module == "cls.predictions.transform.dense";
  const std::string blocks = family == "gpt2" ? "h." : family == "bert" ? "encoder.layer." : "layers.";
  if (module.rfind(blocks, 0) != 0 && !(family == "bert" && bert_head)) return false;
  const std::string leaf = models::ModuleName(module);
  const std::vector<std::string> targets =
      c.lora.target_modules.empty() ? models::DefaultLoraTargets(family) : c.lora.target_modules;
  return std::find(targets.begin(), targets.end(), leaf) != targets.end();
}

}  // namespace

bool TrainsWholeWithLora(const Config& c, const std::string& name) {
  return c.lora.enabled && c.model_type == models::ModelType::kBert && c.bert.num_labels > 0 &&
         name.rfind("classifier.", 0) == 0;
}

std::vector<models::ParameterShape> ParameterShapesOf(const Config& c) {
  std::vector<models::ParameterShape> base = BaseShapesOf(c);
  if (!c.lora.enabled) return base;
  // As AttachLora registers them: each adapted Linear's lora_A and lora_B right after its
  // own weight and bias (named_parameters order); everything else frozen.
  std::vector<models::ParameterShape> out;
  for (size_t i = 0; i < base.size(); ++i) {
    out.push_back(base[i]);
    out.back().frozen = !TrainsWholeWithLora(c, base[i].name);
    const std::string module = models::ModuleOfParameter(base[i].name);
    const bool last_of_module = i + 1 == base.size() || models::ModuleOfParameter(base[i + 1].name) != module;
    if (!last_of_module || !Adapted(c, module)) continue;
    const auto [in, features_out] = LinearFeatures(c, module);
    out.push_back({module + ".lora_A.weight", c.lora.r * in, base[i].used_by_blocks, false});
    out.push_back({module + ".lora_B.weight", features_out * c.lora.r, base[i].used_by_blocks, false});
  }
  return out;
}

bool EmbeddingOnHost(const Config& c, const std::string& name) {
  if (!c.chunk.cpu_embedding) return false;
  if (c.model_type == models::ModelType::kGpt) {
    return name == "wpe.weight" || (name == "wte.weight" && !c.model.tie_word_embeddings);
  }
  if (c.model_type == models::ModelType::kLlama) {
    return name == "embed_tokens.weight" && !c.model.tie_word_embeddings;
  }
  return name == "embeddings.position_embeddings.weight" || name == "embeddings.token_type_embeddings.weight" ||
         (name == "embeddings.word_embeddings.weight" && c.bert.num_labels > 0);
}

}  // namespace ps::trainer
