// HF BERT folders, in and out: config.json of BertForMaskedLM / BertForPreTraining /
// BertForSequenceClassification / BertModel, its safetensors weights, and the mapping to
// ps::models::Bert parameters (HF names without "bert."; old LayerNorm gamma/beta names
// read as weight/bias; the tied decoder and the position_ids buffer ignored).
#pragma once

#include <string>
#include <vector>

#include "models/bert_config.h"
#include "models/hf_folder.h"  // HfExportOptions
#include "models/safetensors.h"

namespace ps::models {

// The shape and heads a config.json gives (hidden_size, num_hidden_layers, ...;
// heads from `architectures`: ...ForMaskedLM -> MLM, ...ForPreTraining -> MLM + NSP,
// ...ForSequenceClassification -> num_labels). Throws c10::Error naming the file and key
// for a missing key, a model_type other than bert, or what this BERT does not implement
// (hidden_act other than gelu, position_embedding_type other than absolute).
BertConfig ReadHfBertConfig(const std::string& folder);

// The folder's weights by ps::models::Bert parameter name, as memory-mapped views (one
// tensor at a time is copied by whoever takes them). Every parameter of `config` must be
// there with its shape; the ignorable keys are skipped; a head's weights the config does
// not have (an MLM head when loading a classifier) are skipped too, so a pre-trained
// BertForMaskedLM folder starts a classifier (its new head keeps its random init: the
// returned map lacks it, and `missing` lists it). Any other key is an error.
struct HfBertWeights {
  TensorMap params;
  std::vector<std::string> missing;  // head parameters the folder does not have
};
HfBertWeights MapHfBertWeights(const std::string& folder, const BertConfig& config);

// Writes config.json and model.safetensors (sharded above the limit, as the GPT-2 export)
// for `params` (ps names): HF names ("bert." prefix), the tied decoder not written.
std::vector<std::string> WriteHfBertWeights(const std::string& folder, const TensorMap& params,
                                            const BertConfig& config, const HfExportOptions& options);

}  // namespace ps::models
