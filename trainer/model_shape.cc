#include "trainer/model_shape.h"

#include "models/gpt_config.h"
#include "models/llama_config.h"
#include "trainer/llama_keys.h"

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

int64_t EstimateActivationBytesFp32(const Config& c, int64_t tokens, int64_t micro_batches_kept) {
  if (c.model_type == models::ModelType::kLlama) {
    return models::EstimateLlamaActivationBytes(LlamaConfigOf(c), tokens, /*element_bytes=*/4, micro_batches_kept);
  }
  return models::EstimateActivationBytes(c.model, tokens, /*element_bytes=*/4, micro_batches_kept);
}

std::string ModelKindName(const Config& c) {
  if (c.model_type == models::ModelType::kGpt) return "GPT";
  if (c.model_type == models::ModelType::kLlama) return "Llama";
  if (c.bert.num_labels > 0) return "BERT classifier (" + std::to_string(c.bert.num_labels) + " labels)";
  return "BERT masked LM";
}

}  // namespace ps::trainer
