#include "trainer/config/model_shape.h"

#include "models/bert_config.h"
#include "models/gpt_config.h"
#include "models/llama_config.h"
#include "trainer/config/llama_keys.h"

namespace ps::trainer {

void ValidateModelShape(const Config& c) {
  if (c.model_type != models::ModelType::kLlama) {
    models::GptParameterCount(c.model);
    return;
  }
  const models::LlamaConfig llama = LlamaConfigOf(c);
  models::ValidateLlamaConfig(llama);
  models::LlamaParameterCount(llama);
}

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

int64_t ActivationBytesOf(const Config& c, int64_t tokens, int64_t element_bytes, int64_t micro_batches_kept) {
  if (c.model_type == models::ModelType::kGpt) {
    return models::EstimateActivationBytes(c.model, tokens, element_bytes, micro_batches_kept);
  }
  if (c.model_type == models::ModelType::kLlama) {
    return models::EstimateLlamaActivationBytes(LlamaConfigOf(c), tokens, element_bytes, micro_batches_kept);
  }
  return models::EstimateBertActivationBytes(BertConfigOf(c), tokens, element_bytes);
}

int64_t AttentionWidthOf(const Config& c) {
  const bool own_head_width = c.model_type == models::ModelType::kLlama && c.llama.head_dim > 0;
  return own_head_width ? c.model.n_head * c.llama.head_dim : c.model.n_embd;
}

std::string ModelKindName(const Config& c) {
  if (c.model_type == models::ModelType::kGpt) return "GPT";
  if (c.model_type == models::ModelType::kLlama) return "Llama";
  if (c.bert.num_labels > 0) return "BERT classifier (" + std::to_string(c.bert.num_labels) + " labels)";
  return "BERT masked LM";
}

}  // namespace ps::trainer
