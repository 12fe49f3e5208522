#include "models/bert.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/loss.h>

#include "models/leaf_linear.h"
#include "models/lora.h"
#include "models/recompute.h"
#include "models/sliced_head.h"
#include "models/uninitialised_modules.h"

namespace ps::models {
namespace F = torch::nn::functional;

namespace {

torch::nn::LayerNorm Norm(const BertConfig& c) {
  return torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.n_embd}).eps(c.layer_norm_eps));
}

}  // namespace

void InitBertParameter(const BertConfig& config, const std::string& name, at::Tensor values, uint64_t run_seed) {
  CheckInitValues(name, values);
  at::NoGradGuard no_grad;
  const bool bias = name.size() >= 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
  if (name.find("LayerNorm") != std::string::npos) {
    bias ? values.zero_() : values.fill_(1.0);
  } else if (values.dim() == 1) {  // linear biases and the MLM output bias
    values.zero_();
  } else {
    FillNormal(values, config.init_std, run_seed, name);
    if (name == "embeddings.word_embeddings.weight") values[0].zero_();  // pad_token_id 0
  }
}

BertLayerImpl::BertLayerImpl(const BertConfig& c) : n_head_(c.n_head), attention_dropout_(c.attention_dropout) {
  query = register_module("query", UninitialisedLinear(c.n_embd, c.n_embd));
  key = register_module("key", UninitialisedLinear(c.n_embd, c.n_embd));
  value = register_module("value", UninitialisedLinear(c.n_embd, c.n_embd));
  attn_out = register_module("attn_out", UninitialisedLinear(c.n_embd, c.n_embd));
  attn_norm = register_module("attn_norm", Norm(c));
  intermediate = register_module("intermediate", UninitialisedLinear(c.n_embd, c.mlp_width()));
  output = register_module("output", UninitialisedLinear(c.mlp_width(), c.n_embd));
  out_norm = register_module("out_norm", Norm(c));
  dropout = register_module("dropout", torch::nn::Dropout(c.dropout));
}

at::Tensor BertLayerImpl::forward(const at::Tensor& x, const at::Tensor& keep) {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2);
  const int64_t head_dim = C / n_head_;
  auto heads = [&](const at::Tensor& t) { return t.view({B, T, n_head_, head_dim}).transpose(1, 2); };  // [B, nh, T, hd]
  const bool leaf = save_weight_leaves;
  const double p = is_training() ? attention_dropout_ : 0.0;
  std::optional<at::Tensor> mask;
  if (keep.defined()) mask = keep;
  auto y = at::scaled_dot_product_attention(heads(ApplyLinear(query, x, leaf)), heads(ApplyLinear(key, x, leaf)),
                                            heads(ApplyLinear(value, x, leaf)), mask, p, /*is_causal=*/false);
  y = ApplyLinear(attn_out, y.transpose(1, 2).contiguous().view({B, T, C}), leaf);
  const at::Tensor h = attn_norm(x + dropout(y));
  const at::Tensor m = ApplyLinear(output, at::gelu(ApplyLinear(intermediate, h, leaf)), leaf);  // erf GELU
  return out_norm(h + dropout(m));
}

BertImpl::BertImpl(const BertConfig& config) : BertImpl(config, kUninitialised) {
  const uint64_t seed = SeedFromDefaultGenerator();
  InitParameters(BlockParameters(), InitPlan{seed, {}}, [&](const std::string& name, at::Tensor values) {
    InitBertParameter(config_, name, std::move(values), seed);
  });
}

BertImpl::BertImpl(const BertConfig& config, Uninitialised) : config_(config) {
  ValidateBertConfig(config_);
  const auto& c = config_;
  word_embeddings = register_module("word_embeddings", UninitialisedEmbedding(c.vocab_size, c.n_embd));
  position_embeddings = register_module("position_embeddings", UninitialisedEmbedding(c.n_positions, c.n_embd));
  token_type_embeddings = register_module("token_type_embeddings", UninitialisedEmbedding(c.type_vocab_size, c.n_embd));
  embeddings_norm = register_module("embeddings_norm", Norm(c));
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.n_layer; ++i) layers->push_back(BertLayer(c));
  if (c.has_pooler()) pooler = register_module("pooler", UninitialisedLinear(c.n_embd, c.n_embd));
  if (c.mlm_head) {
    mlm_transform = register_module("mlm_transform", UninitialisedLinear(c.n_embd, c.n_embd));
    mlm_norm = register_module("mlm_norm", Norm(c));
    mlm_bias = register_parameter("mlm_bias", at::empty({c.vocab_size}));
  }
  if (c.nsp_head) nsp = register_module("nsp", UninitialisedLinear(c.n_embd, 2));
  if (c.num_labels > 0) classifier = register_module("classifier", UninitialisedLinear(c.n_embd, c.num_labels));
  dropout = register_module("dropout", torch::nn::Dropout(c.dropout));
}

at::Tensor BertImpl::Linear(torch::nn::Linear& m, const at::Tensor& x) const {
  return ApplyLinear(m, x, save_weight_leaves_);
}

at::Tensor BertImpl::Encode(const BertInputs& in, LayerHooks* hooks) {
  LayerHooks none;
  LayerHooks& hk = hooks ? *hooks : none;
  const at::Tensor& ids = in.input_ids;
  TORCH_CHECK(ids.dim() == 2, "BERT input_ids must be [batch, seq], got ", ids.sizes());
  const int64_t T = ids.size(1);
  TORCH_CHECK(T <= config_.n_positions, "sequence length ", T, " exceeds model.n_positions ", config_.n_positions);
  int block = 0;
  hk.PreForward(block);
  const at::Tensor pos = at::arange(T, ids.options().dtype(at::kLong));
  const at::Tensor types = in.token_type_ids.defined() ? in.token_type_ids : at::zeros_like(ids);
  at::Tensor x;
  if (host_embedding_) {  // summed in fp32 on the host; a word embedding tied to the decoder stays on the device
    const at::Device host = at::kCPU;
    at::Tensor on_host = position_embeddings(pos.to(host)) + token_type_embeddings(types.to(host));
    if (!config_.mlm_head) on_host = word_embeddings(ids.to(host)) + on_host;
    on_host = on_host.to(embedding_out_device_, embedding_out_dtype_);
    x = config_.mlm_head ? word_embeddings(ids) + on_host : on_host;
  } else {
    x = word_embeddings(ids) + position_embeddings(pos) + token_type_embeddings(types);
  }
  x = dropout(embeddings_norm(x));
  x = hk.PostForward(block, x);
  at::Tensor keep;  // [B, 1, 1, T]: every query attends to the non-padding keys
  if (in.attention_mask.defined()) keep = in.attention_mask.to(at::kBool).view({ids.size(0), 1, 1, T});
  const bool recompute = config_.activation_checkpointing && is_training() && at::GradMode::is_enabled();
  for (const auto& m : *layers) {
    ++block;
    hk.PreForward(block);
    auto* layer = m->as<BertLayerImpl>();
    if (recompute) {
      x = RecomputedCall(
          x, [layer, keep](const at::Tensor& input) { return layer->forward(input, keep); },
          [hooks, block] {
            if (hooks) hooks->PreForward(block);
          });
    } else {
      x = layer->forward(x, keep);
    }
    x = hk.PostForward(block, x);
  }
  return x;
}

at::Tensor BertImpl::MlmTransform(const at::Tensor& hidden) {
  TORCH_CHECK(config_.mlm_head, "this BERT has no MLM head (model.mlm_head: false)");
  return mlm_norm(at::gelu(Linear(mlm_transform, hidden)));
}

at::Tensor BertImpl::MlmLogits(const at::Tensor& hidden) {
  const at::Tensor t = MlmTransform(hidden);
  const at::Tensor w = word_embeddings->weight;  // the decoder is tied to the word embeddings
  return save_weight_leaves_ ? LeafLinear(t, w, mlm_bias) : F::linear(t, w, mlm_bias);
}

at::Tensor BertImpl::Pooled(const at::Tensor& hidden) {
  return at::tanh(Linear(pooler, hidden.select(1, 0)));  // the [CLS] position
}

at::Tensor BertImpl::ClassifierLogits(const at::Tensor& hidden) {
  TORCH_CHECK(config_.num_labels > 0, "this BERT has no classifier (model.num_labels: 0)");
  return Linear(classifier, dropout(Pooled(hidden)));
}

at::Tensor BertImpl::NspLogits(const at::Tensor& hidden) {
  TORCH_CHECK(config_.nsp_head, "this BERT has no NSP head (model.nsp_head: false)");
  return Linear(nsp, Pooled(hidden));
}

at::Tensor BertImpl::MlmLoss(const BertInputs& in, const at::Tensor& labels, LayerHooks* hooks, at::Tensor* correct,
                            at::Tensor* counted) {
  LayerHooks none;
  LayerHooks& hk = hooks ? *hooks : none;
  const at::Tensor hidden = Encode(in, hooks);
  const int head = num_blocks() - 1;
  hk.PreForward(head);
  const at::Tensor flat_labels = labels.reshape({-1});
  const at::Tensor picked = flat_labels.ne(-100).nonzero().squeeze(1);  // the masked positions only
  const at::Tensor rows = hidden.reshape({-1, hidden.size(-1)}).index_select(0, picked);
  const at::Tensor targets = flat_labels.index_select(0, picked);
  at::Tensor loss;
  if (picked.numel() > 0) {  // the decoder's logits never whole (sliced_head.h)
    loss = SlicedCrossEntropy(MlmTransform(rows), word_embeddings->weight, mlm_bias, targets,
                              LossSliceTokens(config_.loss_slice_tokens, config_.vocab_size), correct);
  } else {  // no masked position: the mean would be 0/0; zero rows of logits, still connected
    const at::Tensor logits = MlmLogits(rows).to(at::kFloat);
    loss = logits.sum() * 0.0;
    if (correct != nullptr) *correct = at::zeros({}, targets.options());
  }
  if (counted != nullptr) {
    *counted = at::scalar_tensor(picked.numel(), at::TensorOptions().dtype(at::kLong).device(loss.device()));
  }
  return hk.PostForward(head, loss);
}

at::Tensor BertImpl::ClassificationLoss(const BertInputs& in, const at::Tensor& labels, LayerHooks* hooks,
                                        at::Tensor* correct) {
  LayerHooks none;
  LayerHooks& hk = hooks ? *hooks : none;
  const at::Tensor hidden = Encode(in, hooks);
  const int head = num_blocks() - 1;
  hk.PreForward(head);
  const at::Tensor logits = ClassifierLogits(hidden).to(at::kFloat);
  if (correct != nullptr) *correct = logits.detach().argmax(-1).eq(labels.reshape({-1})).sum();
  return hk.PostForward(head, F::cross_entropy(logits, labels.reshape({-1})));
}

void BertImpl::set_host_embedding(bool on, at::Device device, at::ScalarType dtype) {
  host_embedding_ = on;
  embedding_out_device_ = device;
  embedding_out_dtype_ = dtype;
}

namespace {

// The factors of a LoRA adapter on `lin` (its children lora_A and lora_B, models/lora.h),
// when it has one, as "<path>.lora_A.weight" and "<path>.lora_B.weight".
void AddAdapter(std::vector<BlockParameter>& out, const std::string& path, const torch::nn::Linear& lin, int block) {
  for (const auto& child : lin->named_children()) {
    out.push_back({path + "." + child.key() + ".weight", child.value()->named_parameters(false)["weight"], block, {block}});
  }
}

}  // namespace

std::vector<BlockParameter> BertImpl::BlockParameters() const {
  std::vector<BlockParameter> out;
  const int head = num_blocks() - 1;
  const std::vector<int> word_blocks = config_.mlm_head ? std::vector<int>{0, head} : std::vector<int>{0};
  out.push_back({"embeddings.word_embeddings.weight", word_embeddings->weight, 0, word_blocks});
  out.push_back({"embeddings.position_embeddings.weight", position_embeddings->weight, 0, {0}});
  out.push_back({"embeddings.token_type_embeddings.weight", token_type_embeddings->weight, 0, {0}});
  out.push_back({"embeddings.LayerNorm.weight", embeddings_norm->weight, 0, {0}});
  out.push_back({"embeddings.LayerNorm.bias", embeddings_norm->bias, 0, {0}});
  int block = 0;
  for (const auto& m : *layers) {
    ++block;
    const auto* l = m->as<BertLayerImpl>();
    const std::string p = "encoder.layer." + std::to_string(block - 1) + ".";
    auto add = [&](const std::string& name, const torch::nn::Linear& lin) {
      out.push_back({p + name + ".weight", lin->weight, block, {block}});
      out.push_back({p + name + ".bias", lin->bias, block, {block}});
      AddAdapter(out, p + name, lin, block);
    };
    auto add_norm = [&](const std::string& name, const torch::nn::LayerNorm& ln) {
      out.push_back({p + name + ".weight", ln->weight, block, {block}});
      out.push_back({p + name + ".bias", ln->bias, block, {block}});
    };
    add("attention.self.query", l->query);
    add("attention.self.key", l->key);
    add("attention.self.value", l->value);
    add("attention.output.dense", l->attn_out);
    add_norm("attention.output.LayerNorm", l->attn_norm);
    add("intermediate.dense", l->intermediate);
    add("output.dense", l->output);
    add_norm("output.LayerNorm", l->out_norm);
  }
  auto add_head = [&](const std::string& name, const at::Tensor& t) { out.push_back({name, t, head, {head}}); };
  if (config_.has_pooler()) {
    add_head("pooler.dense.weight", pooler->weight);
    add_head("pooler.dense.bias", pooler->bias);
    AddAdapter(out, "pooler.dense", pooler, head);
  }
  if (config_.mlm_head) {
    add_head("cls.predictions.transform.dense.weight", mlm_transform->weight);
    add_head("cls.predictions.transform.dense.bias", mlm_transform->bias);
    AddAdapter(out, "cls.predictions.transform.dense", mlm_transform, head);
    add_head("cls.predictions.transform.LayerNorm.weight", mlm_norm->weight);
    add_head("cls.predictions.transform.LayerNorm.bias", mlm_norm->bias);
    add_head("cls.predictions.bias", mlm_bias);
  }
  if (config_.nsp_head) {
    add_head("cls.seq_relationship.weight", nsp->weight);
    add_head("cls.seq_relationship.bias", nsp->bias);
  }
  if (config_.num_labels > 0) {
    add_head("classifier.weight", classifier->weight);
    add_head("classifier.bias", classifier->bias);
  }
  return out;
}

ParameterCounts BertImpl::CountParameters() const {
  ParameterCounts c;
  for (const auto& p : BlockParameters()) c.total_numel += p.tensor.numel();
  c.embedding_numel =
      word_embeddings->weight.numel() + position_embeddings->weight.numel() + token_type_embeddings->weight.numel();
  c.non_embedding_numel = c.total_numel - c.embedding_numel;
  return c;
}

void BertImpl::set_save_weight_leaves(bool on) {
  save_weight_leaves_ = on;
  for (const auto& m : *layers) m->as<BertLayerImpl>()->save_weight_leaves = on;
}

}  // namespace ps::models
