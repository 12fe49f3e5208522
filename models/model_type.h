// ModelType: which architecture a run trains (`model.type`), and the BERT and Llama keys
// beyond the shape all share (model.n_layer, n_head, n_embd, n_positions, vocab_size,
// dropout, layer_norm_eps, init_std, tie_word_embeddings, activation_checkpointing live
// in GptConfig; model.intermediate_size in BertKeys serves BERT and Llama).
// Plain data; trainer/ fills it from YAML.
#pragma once

#include <cstdint>

#include "models/llama_config.h"

namespace ps::models {

enum class ModelType { kGpt, kBert, kLlama };

// The family whose module names lora.target_modules uses (models/lora_config.h).
inline const char* LoraFamilyOf(ModelType t) {
  return t == ModelType::kGpt ? "gpt2" : t == ModelType::kBert ? "bert" : "llama";
}

struct BertKeys {
  int64_t intermediate_size = 0;  // MLP width; 0 = 4 x n_embd
  int64_t type_vocab_size = 2;    // segment ids
  // > 0: fine-tune for sequence classification with this many labels (the classifier
  // head on the pooled [CLS]); 0: masked-LM pre-training.
  int64_t num_labels = 0;
};

// The model.* keys of model.type: llama only (the rest of its LlamaConfig comes from the
// shared keys; trainer/config/llama_keys.h assembles it).
struct LlamaKeys {
  int64_t num_key_value_heads = 0;  // 0 = n_head; must divide n_head (1 = multi-query)
  int64_t head_dim = 0;             // 0 = n_embd / n_head
  double rope_theta = 10000.0;      // rotary base
  RopeScaling rope_scaling;         // long-context rescaling of the rotary frequencies
  bool attention_bias = false;      // q/k/v and o projections have biases (HF Llama's attention_bias)
  bool qkv_bias = false;            // only q/k/v have biases (Qwen2)
  bool qk_norm = false;             // per-head RMSNorm of q and k (Qwen3)
  int64_t sliding_window = 0;       // > 0: each token attends to at most this many (Mistral)
};

}  // namespace ps::models
