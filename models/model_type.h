// ModelType: which architecture a run trains (`model.type`), and the BERT keys beyond
// the shape GPT and BERT share (model.n_layer, n_head, n_embd, n_positions, vocab_size,
// dropout, layer_norm_eps, init_std, activation_checkpointing live in GptConfig).
// Plain data; trainer/ fills it from YAML.
#pragma once

#include <cstdint>

namespace ps::models {

enum class ModelType { kGpt, kBert };

struct BertKeys {
  int64_t intermediate_size = 0;  // MLP width; 0 = 4 x n_embd
  int64_t type_vocab_size = 2;    // segment ids
  // > 0: fine-tune for sequence classification with this many labels (the classifier
  // head on the pooled [CLS]); 0: masked-LM pre-training.
  int64_t num_labels = 0;
};

}  // namespace ps::models
