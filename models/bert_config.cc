#include "models/bert_config.h"

#include <c10/util/Exception.h>

namespace ps::models {

const std::vector<BertPreset>& BertPresets() {
  static const std::vector<BertPreset> presets = {
      {"bert-base", 12, 12, 768, 512, 30522},
      {"bert-large", 24, 16, 1024, 512, 30522},
      {"Bert", 6, 12, 768, 512, 30522},        // PatrickStar examples/model_builder.py
      {"Bertlarge", 24, 16, 1024, 512, 30522},
  };
  return presets;
}

std::optional<BertPreset> FindBertPreset(const std::string& name) {
  for (const auto& p : BertPresets()) {
    if (p.name == name) return p;
  }
  return std::nullopt;
}

void ValidateBertConfig(const BertConfig& c) {
  TORCH_CHECK(c.n_layer > 0, "model.n_layer must be > 0, got ", c.n_layer);
  TORCH_CHECK(c.n_head > 0, "model.n_head must be > 0, got ", c.n_head);
  TORCH_CHECK(c.n_embd > 0 && c.n_embd % c.n_head == 0, "model.n_embd ", c.n_embd,
              " must be a positive multiple of model.n_head ", c.n_head);
  TORCH_CHECK(c.n_positions > 0, "model.n_positions must be > 0, got ", c.n_positions);
  TORCH_CHECK(c.vocab_size > 0, "model.vocab_size must be > 0, got ", c.vocab_size);
  TORCH_CHECK(c.type_vocab_size > 0, "model.type_vocab_size must be > 0, got ", c.type_vocab_size);
  TORCH_CHECK(c.intermediate_size >= 0, "model.intermediate_size must be >= 0, got ", c.intermediate_size);
  TORCH_CHECK(c.num_labels >= 0, "model.num_labels must be >= 0, got ", c.num_labels);
  TORCH_CHECK(c.mlm_head || c.nsp_head || c.num_labels > 0, "a BERT needs a head: model.mlm_head, model.nsp_head "
              "or model.num_labels > 0");
}

}  // namespace ps::models
