#include "models/trainable.h"

#include <c10/util/Exception.h>

namespace ps::models {

std::vector<LossOutput> TrainableModel::LossMany(const std::vector<Batch>& /*batches*/, LayerHooks* /*hooks*/) {
  TORCH_CHECK(false, "this model has no block-major forward (train.accumulation_schedule: vertical is GPT and Llama only)");
  return {};
}

std::vector<std::string> TrainableModel::AttachLora(const LoraConfig& /*config*/) {
  TORCH_CHECK(false, "lora: this model takes no adapters (GPT-2, the Llama family and BERT do)");
  return {};
}

}  // namespace ps::models
