// Bert: HF BertModel on LibTorch (word + position + token-type embeddings with
// LayerNorm, post-LN encoder blocks with padding-masked scaled_dot_product_attention and
// erf GELU, dropout), with the heads of BertForMaskedLM (transform + decoder tied to the
// word embeddings + output bias), the NSP head and BertForSequenceClassification's
// classifier on the pooler.
//
// Parameter names are HF's without the "bert." prefix ("embeddings.word_embeddings.weight",
// "encoder.layer.0.attention.self.query.weight", "cls.predictions.bias", "classifier.weight")
// and Linear weights are [out, in] as in HF, so HF import/export is a renaming
// (hf_bert.h). Blocks for LayerHooks: 0 = embeddings, 1..n_layer = encoder layers,
// n_layer + 1 = pooler and heads (the tied word embedding is used by 0 and the last).
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>

#include <vector>

#include "models/bert_config.h"
#include "models/block_parameter.h"
#include "models/layer_hooks.h"
#include "models/param_init.h"

namespace ps::models {

// One encoder block: self-attention (query/key/value/output dense) + LayerNorm, then
// the MLP (intermediate/output dense) + LayerNorm; residuals before each norm (post-LN).
class BertLayerImpl : public torch::nn::Module {
 public:
  explicit BertLayerImpl(const BertConfig& c);  // parameters uninitialised (BertImpl fills them)
  // x [B, T, C]; keep [B, 1, 1, T] bool (true = attend) or undefined (no padding).
  at::Tensor forward(const at::Tensor& x, const at::Tensor& keep);

  torch::nn::Linear query{nullptr}, key{nullptr}, value{nullptr}, attn_out{nullptr};
  torch::nn::LayerNorm attn_norm{nullptr}, out_norm{nullptr};
  torch::nn::Linear intermediate{nullptr}, output{nullptr};
  torch::nn::Dropout dropout{nullptr};
  bool save_weight_leaves = false;

 private:
  int64_t n_head_;
  double attention_dropout_;
};
TORCH_MODULE(BertLayer);

// The inputs of one batch. token_type_ids and attention_mask may be undefined (all
// segment A; no padding).
struct BertInputs {
  at::Tensor input_ids;       // [B, T] int64
  at::Tensor token_type_ids;  // [B, T] int64
  at::Tensor attention_mask;  // [B, T] 1 = token, 0 = padding
};

class BertImpl : public torch::nn::Module {
 public:
  // Initialised (models/param_init.h), from a run seed drawn from LibTorch's default
  // generator (torch::manual_seed decides it).
  explicit BertImpl(const BertConfig& config);
  // Parameters allocated but not written: the trainer fills them with InitBertParameter,
  // in place (plain runs) or in their chunk slots (chunk runs).
  BertImpl(const BertConfig& config, Uninitialised);

  // The encoder's last hidden states [B, T, C]. Hooks: blocks 0..n_layer.
  at::Tensor Encode(const BertInputs& in, LayerHooks* hooks = nullptr);
  // The heads (block n_layer + 1), without hooks: the losses below wrap them in the
  // block's hooks.
  at::Tensor MlmLogits(const at::Tensor& hidden);         // [..., C] -> [..., V]
  at::Tensor ClassifierLogits(const at::Tensor& hidden);  // [B, T, C] -> [B, labels]
  at::Tensor NspLogits(const at::Tensor& hidden);         // [B, T, C] -> [B, 2]

  // Mean cross-entropy over positions whose label is not -100 (HF's ignore index); only
  // those positions go through the MLM head, its decoder's logits never whole
  // (config().loss_slice_tokens at a time, sliced_head.h). labels [B, T]. A batch with no such
  // position has loss 0 (still connected to the parameters, so backward runs).
  // `correct` / `counted` (optional): how many of those positions the argmax predicts,
  // out of how many (int64 scalars, detached).
  at::Tensor MlmLoss(const BertInputs& in, const at::Tensor& labels, LayerHooks* hooks = nullptr,
                     at::Tensor* correct = nullptr, at::Tensor* counted = nullptr);
  // Mean cross-entropy of the classifier; labels [B]. `correct`: as above.
  at::Tensor ClassificationLoss(const BertInputs& in, const at::Tensor& labels, LayerHooks* hooks = nullptr,
                                at::Tensor* correct = nullptr);

  std::vector<BlockParameter> BlockParameters() const;
  ParameterCounts CountParameters() const;
  int num_blocks() const { return static_cast<int>(config_.n_layer) + 2; }
  void set_save_weight_leaves(bool on);
  // chunk.cpu_embedding (PatrickStar's use_cpu_embedding): the position and token-type
  // embeddings (and the word embedding when no MLM decoder is tied to it) live on the host
  // in fp32 and are summed there; the sum goes to `device` in `dtype`.
  void set_host_embedding(bool on, at::Device device, at::ScalarType dtype);
  const BertConfig& config() const { return config_; }

  torch::nn::Embedding word_embeddings{nullptr}, position_embeddings{nullptr}, token_type_embeddings{nullptr};
  torch::nn::LayerNorm embeddings_norm{nullptr};
  torch::nn::ModuleList layers{nullptr};
  torch::nn::Linear pooler{nullptr};                                    // has_pooler()
  torch::nn::Linear mlm_transform{nullptr};                             // mlm_head
  torch::nn::LayerNorm mlm_norm{nullptr};
  at::Tensor mlm_bias;                                                  // [V]
  torch::nn::Linear nsp{nullptr}, classifier{nullptr};
  torch::nn::Dropout dropout{nullptr};

 private:
  at::Tensor Linear(torch::nn::Linear& m, const at::Tensor& x) const;
  at::Tensor MlmTransform(const at::Tensor& hidden);  // the MLM head before its decoder: [..., C] -> [..., C]
  at::Tensor Pooled(const at::Tensor& hidden);
  BertConfig config_;
  bool save_weight_leaves_ = false;
  bool host_embedding_ = false;
  at::Device embedding_out_device_ = at::kCPU;
  at::ScalarType embedding_out_dtype_ = at::kFloat;
};
TORCH_MODULE(Bert);

// HF BertPreTrainedModel._init_weights for parameter `name` (as in
// BertImpl::BlockParameters()) and run seed `run_seed` (models/param_init.h): N(0,
// init_std) for linear and embedding weights (row 0 of the word embedding, the padding
// token, zeroed); biases 0 (the MLM output bias too); LayerNorm weight 1, bias 0.
void InitBertParameter(const BertConfig& config, const std::string& name, at::Tensor values, uint64_t run_seed);

}  // namespace ps::models
