#include "trainer/model_factory.h"

namespace ps::trainer {

models::BertConfig BertConfigOf(const Config& c) {
  models::BertConfig b;
  b.n_layer = c.model.n_layer;
  b.n_head = c.model.n_head;
  b.n_embd = c.model.n_embd;
  b.n_positions = c.model.n_positions;
  b.vocab_size = c.model.vocab_size;
  b.dropout = c.model.dropout;
  b.attention_dropout = c.model.dropout;
  b.layer_norm_eps = c.model.layer_norm_eps;
  b.init_std = c.model.init_std;
  b.activation_checkpointing = c.model.activation_checkpointing;
  b.loss_slice_tokens = c.model.loss_slice_tokens;
  b.intermediate_size = c.bert.intermediate_size;
  b.type_vocab_size = c.bert.type_vocab_size;
  b.num_labels = c.bert.num_labels;
  b.mlm_head = c.bert.num_labels == 0;
  b.nsp_head = false;
  return b;
}

std::unique_ptr<models::TrainableModel> MakeModel(const Config& c) {
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

int64_t ActivationBytesOf(const Config& c, int64_t tokens, int64_t element_bytes, int64_t micro_batches_kept) {
  if (c.model_type == models::ModelType::kGpt) {
    return models::EstimateActivationBytes(c.model, tokens, element_bytes, micro_batches_kept);
  }
  if (c.model_type == models::ModelType::kLlama) {
    return models::EstimateLlamaActivationBytes(LlamaConfigOf(c), tokens, element_bytes, micro_batches_kept);
  }
  return models::EstimateBertActivationBytes(BertConfigOf(c), tokens, element_bytes);
}

}  // namespace ps::trainer
