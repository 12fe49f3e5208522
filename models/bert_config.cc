#include "models/bert_config.h"

#include <c10/util/Exception.h>

#include <algorithm>

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

std::vector<ParameterShape> BertParameterShapes(const BertConfig& c) {
  const int64_t e = c.n_embd, m = c.mlp_width();
  const int head = static_cast<int>(c.n_layer) + 1;
  std::vector<ParameterShape> out;
  out.push_back({"embeddings.word_embeddings.weight", c.vocab_size * e,
                 c.mlm_head ? std::vector<int>{0, head} : std::vector<int>{0}});
  out.push_back({"embeddings.position_embeddings.weight", c.n_positions * e, {0}});
  out.push_back({"embeddings.token_type_embeddings.weight", c.type_vocab_size * e, {0}});
  out.push_back({"embeddings.LayerNorm.weight", e, {0}});
  out.push_back({"embeddings.LayerNorm.bias", e, {0}});
  for (int b = 1; b <= c.n_layer; ++b) {
    const std::string p = "encoder.layer." + std::to_string(b - 1) + ".";
    const std::pair<const char*, int64_t> block[] = {
        {"attention.self.query.weight", e * e},   {"attention.self.query.bias", e},
        {"attention.self.key.weight", e * e},     {"attention.self.key.bias", e},
        {"attention.self.value.weight", e * e},   {"attention.self.value.bias", e},
        {"attention.output.dense.weight", e * e}, {"attention.output.dense.bias", e},
        {"attention.output.LayerNorm.weight", e}, {"attention.output.LayerNorm.bias", e},
        {"intermediate.dense.weight", m * e},     {"intermediate.dense.bias", m},
        {"output.dense.weight", e * m},           {"output.dense.bias", e},
        {"output.LayerNorm.weight", e},           {"output.LayerNorm.bias", e}};
    for (const auto& [name, numel] : block) out.push_back({p + name, numel, {b}});
  }
  auto add_head = [&](const std::string& name, int64_t numel) { out.push_back({name, numel, {head}}); };
  if (c.has_pooler()) {
    add_head("pooler.dense.weight", e * e);
    add_head("pooler.dense.bias", e);
  }
  if (c.mlm_head) {
    add_head("cls.predictions.transform.dense.weight", e * e);
    add_head("cls.predictions.transform.dense.bias", e);
    add_head("cls.predictions.transform.LayerNorm.weight", e);
    add_head("cls.predictions.transform.LayerNorm.bias", e);
    add_head("cls.predictions.bias", c.vocab_size);
  }
  if (c.nsp_head) {
    add_head("cls.seq_relationship.weight", 2 * e);
    add_head("cls.seq_relationship.bias", 2);
  }
  if (c.num_labels > 0) {
    add_head("classifier.weight", c.num_labels * e);
    add_head("classifier.bias", c.num_labels);
  }
  return out;
}

int64_t EstimateBertActivationBytes(const BertConfig& c, int64_t tokens, int64_t element_bytes) {
  const int64_t e = c.n_embd;
  const int64_t per_block = 13 * e + 2 * c.mlp_width();
  const int64_t blocks = c.activation_checkpointing ? c.n_layer * e + per_block : c.n_layer * per_block;
  const int64_t outside = 3 * e;  // embedding sum, its LayerNorm, the head's input
  const int64_t masked_tokens = tokens * 15 / 100 + 1;  // one slice of them at a time (sliced_head.h)
  const int64_t slice = std::min(masked_tokens, LossSliceTokens(c.loss_slice_tokens, c.vocab_size));
  return (blocks + outside) * element_bytes * tokens + slice * c.vocab_size * kSlicedLogitBytes;
}

}  // namespace ps::models
