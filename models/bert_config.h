// BertConfig: the BERT architecture hyper-parameters (HF BertModel's), owned by models/.
// Plain data; trainer/ fills it from YAML (model.* keys with model.type: bert), models/
// only reads it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "models/gpt_config.h"  // ParameterShape

namespace ps::models {

struct BertConfig {
  int64_t n_layer = 2;             // encoder blocks (num_hidden_layers)
  int64_t n_head = 4;              // attention heads; must divide n_embd
  int64_t n_embd = 128;            // hidden width (hidden_size)
  int64_t intermediate_size = 0;   // MLP width; 0 = 4 x n_embd
  int64_t n_positions = 512;       // max_position_embeddings
  int64_t vocab_size = 30522;
  int64_t type_vocab_size = 2;     // segment ids (A / B)
  double dropout = 0.1;            // hidden_dropout_prob
  double attention_dropout = 0.1;  // attention_probs_dropout_prob
  double layer_norm_eps = 1e-12;
  double init_std = 0.02;          // initializer_range
  bool mlm_head = true;            // BertForMaskedLM's cls.predictions (decoder tied to the word embeddings)
  bool nsp_head = false;           // cls.seq_relationship (needs the pooler)
  int64_t num_labels = 0;          // > 0: a sequence-classification head on the pooler
  bool activation_checkpointing = false;
  int64_t loss_slice_tokens = 0;   // masked tokens per MLM-head slice of the loss; 0 = LossSliceTokens' default

  int64_t mlp_width() const { return intermediate_size > 0 ? intermediate_size : 4 * n_embd; }
  bool has_pooler() const { return nsp_head || num_labels > 0; }
};

// BERT sizes: HF bert-base/bert-large and PatrickStar's `Bert` / `Bertlarge`
// (examples/model_builder.py; seq 512, BERT vocab).
struct BertPreset {
  std::string name;
  int64_t n_layer, n_head, n_embd, n_positions, vocab_size;
};
const std::vector<BertPreset>& BertPresets();
std::optional<BertPreset> FindBertPreset(const std::string& name);

// Positive sizes, n_head divides n_embd; throws c10::Error naming the "model." key.
void ValidateBertConfig(const BertConfig& config);

// The parameters of the BERT a config describes, without building it, in the order of
// BertImpl::BlockParameters() (names, element counts, blocks that use them).
std::vector<ParameterShape> BertParameterShapes(const BertConfig& config);

// Estimated peak activation bytes of one training micro-batch of `tokens` tokens, as
// EstimateActivationBytes does for GPT: per block and token about 13 x n_embd + 2 x the
// MLP width elements kept for backward (or n_embd per block plus one block recomputed,
// with activation checkpointing), plus the embeddings; the MLM head runs on the masked
// positions only (mask_ratio 0.15 of the tokens), one slice of them at a time
// (LossSliceTokens, kSlicedLogitBytes per logit, as in gpt_config.h).
int64_t EstimateBertActivationBytes(const BertConfig& config, int64_t tokens, int64_t element_bytes);

}  // namespace ps::models
