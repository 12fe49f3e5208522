#include "trainer/model_factory.h"

#include <c10/util/Exception.h>

#include "models/trainable_models.h"
#include "trainer/config_loader.h"

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

std::vector<models::ParameterShape> ParameterShapesOf(const Config& c) {
  if (c.model_type == models::ModelType::kGpt) return models::GptParameterShapes(c.model);
  if (c.model_type == models::ModelType::kLlama) return models::LlamaParameterShapes(LlamaConfigOf(c));
  return models::BertParameterShapes(BertConfigOf(c));
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
