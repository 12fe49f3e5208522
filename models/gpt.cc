#include "models/gpt.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/init.h>

#include <cmath>
#include <functional>

#include "models/block_passes.h"
#include "models/recompute.h"
#include "models/leaf_linear.h"
#include "models/lora.h"
#include "models/sliced_head.h"
#include "models/uninitialised_modules.h"

namespace ps::models {
namespace F = torch::nn::functional;

namespace {
bool EndsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}
}  // namespace

void InitGptParameter(const GptConfig& config, const std::string& name, at::Tensor values, uint64_t run_seed) {
  CheckInitValues(name, values);
  at::NoGradGuard no_grad;
  const bool bias = EndsWith(name, ".bias");
  if (name.rfind("ln_", 0) == 0 || name.find(".ln_") != std::string::npos) {  // ln_1, ln_2, ln_f
    bias ? values.zero_() : values.fill_(1.0);
  } else if (bias) {
    values.zero_();
  } else if (EndsWith(name, "c_proj.weight")) {  // residual projections (GPT-2 paper)
    FillNormal(values, config.init_std / std::sqrt(2.0 * static_cast<double>(config.n_layer)), run_seed, name);
  } else {
    FillNormal(values, config.init_std, run_seed, name);
  }
}

AttentionImpl::AttentionImpl(const GptConfig& c) : n_head_(c.n_head), dropout_(c.dropout) {
  c_attn = register_module("c_attn", UninitialisedLinear(c.n_embd, 3 * c.n_embd));
  c_proj = register_module("c_proj", UninitialisedLinear(c.n_embd, c.n_embd));
}

at::Tensor AttentionImpl::forward(const at::Tensor& x, const at::Tensor& mask) {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2);
  const int64_t head_dim = C / n_head_;
  auto qkv = ApplyLinear(c_attn, x, save_weight_leaves).split(C, /*dim=*/2);  // 3 x [B, T, C]
  auto heads = [&](const at::Tensor& t) {    // [B, nh, T, hd]
    return t.view({B, T, n_head_, head_dim}).transpose(1, 2);
  };
  const double p = is_training() ? dropout_ : 0.0;
  std::optional<at::Tensor> attn_mask;  // packed rows: block-diagonal causal; else is_causal
  if (mask.defined()) attn_mask = mask;
  auto y = at::scaled_dot_product_attention(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]), attn_mask, p,
                                            /*is_causal=*/!mask.defined());
  return ApplyLinear(c_proj, y.transpose(1, 2).contiguous().view({B, T, C}), save_weight_leaves);
}

MlpImpl::MlpImpl(const GptConfig& c) {
  c_fc = register_module("c_fc", UninitialisedLinear(c.n_embd, 4 * c.n_embd));
  c_proj = register_module("c_proj", UninitialisedLinear(4 * c.n_embd, c.n_embd));
}

at::Tensor MlpImpl::forward(const at::Tensor& x) {
  return ApplyLinear(c_proj, at::gelu(ApplyLinear(c_fc, x, save_weight_leaves), "tanh"), save_weight_leaves);  // HF "gelu_new"
}

BlockImpl::BlockImpl(const GptConfig& c) {
  auto ln = torch::nn::LayerNormOptions({c.n_embd}).eps(c.layer_norm_eps);
  ln_1 = register_module("ln_1", torch::nn::LayerNorm(ln));
  attn = register_module("attn", Attention(c));
  ln_2 = register_module("ln_2", torch::nn::LayerNorm(ln));
  mlp = register_module("mlp", Mlp(c));
  resid_dropout = register_module("resid_dropout", torch::nn::Dropout(c.dropout));
}

at::Tensor BlockImpl::forward(const at::Tensor& x, const at::Tensor& mask) {
  auto h = x + resid_dropout(attn->forward(ln_1(x), mask));
  return h + resid_dropout(mlp(ln_2(h)));
}

GptImpl::GptImpl(const GptConfig& config) : GptImpl(config, kUninitialised) {
  const uint64_t seed = SeedFromDefaultGenerator();
  InitParameters(BlockParameters(), InitPlan{seed, {}}, [&](const std::string& name, at::Tensor values) {
    InitGptParameter(config_, name, std::move(values), seed);
  });
}

GptImpl::GptImpl(const GptConfig& config, Uninitialised) : config_(config) {
  ValidateGptConfig(config_);
  const auto& c = config_;
  wte = register_module("wte", UninitialisedEmbedding(c.vocab_size, c.n_embd));
  wpe = register_module("wpe", UninitialisedEmbedding(c.n_positions, c.n_embd));
  drop = register_module("drop", torch::nn::Dropout(c.dropout));
  h = register_module("h", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.n_layer; ++i) h->push_back(Block(c));
  ln_f = register_module(
      "ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.n_embd}).eps(c.layer_norm_eps)));
  if (!c.tie_word_embeddings) {
    lm_head = register_module("lm_head", UninitialisedLinear(c.n_embd, c.vocab_size, /*bias=*/false));
  }
}

bool GptImpl::recompute() const {
  return config_.activation_checkpointing && is_training() && at::GradMode::is_enabled();
}

at::Tensor GptImpl::Embed(const at::Tensor& idx, const PackedRows& rows) {
  const int64_t T = idx.size(1);
  TORCH_CHECK(T <= config_.n_positions, "sequence length ", T, " exceeds model.n_positions ",
              config_.n_positions);
  // [T] (broadcast over the rows), or the packed rows' [B, T] restarting per example.
  auto pos = rows.position_ids.defined() ? rows.position_ids : at::arange(T, idx.options().dtype(at::kLong));
  at::Tensor x;
  if (host_embedding_ && !config_.tie_word_embeddings) {  // both on the host, summed in fp32
    x = (wte(idx.to(at::kCPU)) + wpe(pos.to(at::kCPU))).to(embedding_out_device_, embedding_out_dtype_);
  } else if (host_embedding_) {  // wte is the LM head too and stays on the device
    x = wte(idx) + wpe(pos.to(at::kCPU)).to(embedding_out_device_, embedding_out_dtype_);
  } else {
    x = wte(idx) + wpe(pos);
  }
  return drop(x);
}

at::Tensor GptImpl::RunBlock(int block, const at::Tensor& x, const PackedRows& rows, LayerHooks* hooks) {
  auto* impl = h[block - 1]->as<BlockImpl>();
  const at::Tensor mask = rows.attn_mask;
  if (!recompute()) return impl->forward(x, mask);
  return RecomputedCall(
      x, [impl, mask](const at::Tensor& in) { return impl->forward(in, mask); },
      [hooks, block] {  // `hooks` may be null: the callers' default no-op object dies with them
        if (hooks) hooks->PreForward(block);
      });
}

at::Tensor GptImpl::Head(const at::Tensor& x) {
  const at::Tensor y = ln_f(x);
  if (config_.tie_word_embeddings) {
    return save_weight_leaves_ ? LeafLinear(y, wte->weight, {}) : F::linear(y, wte->weight);
  }
  return ApplyLinear(lm_head, y, save_weight_leaves_);
}

at::Tensor GptImpl::HeadLoss(const at::Tensor& x, const at::Tensor& targets) {
  const at::Tensor& w = config_.tie_word_embeddings ? wte->weight : lm_head->weight;
  return SlicedCrossEntropy(ln_f(x), w, {}, targets, LossSliceTokens(config_.loss_slice_tokens, config_.vocab_size));
}

BlockPasses GptImpl::Passes(LayerHooks* hooks) {
  BlockPasses p;
  p.n_layer = static_cast<int>(config_.n_layer);
  p.recompute = recompute();
  p.embed = [this](const at::Tensor& idx, const PackedRows& rows) { return Embed(idx, rows); };
  p.run_block = [this, hooks](int block, const at::Tensor& x, const PackedRows& rows) {
    return RunBlock(block, x, rows, hooks);
  };
  p.head = [this](const at::Tensor& x) { return Head(x); };
  p.head_loss = [this](const at::Tensor& x, const at::Tensor& targets) { return HeadLoss(x, targets); };
  return p;
}

at::Tensor GptImpl::forward(const at::Tensor& idx, LayerHooks* hooks, const Packing& packing) {
  return ForwardBlocks(Passes(hooks), idx, hooks, MakePackedRows(packing, idx, /*sliding_window=*/0));
}

std::vector<at::Tensor> GptImpl::LossMany(const std::vector<at::Tensor>& idx, const std::vector<at::Tensor>& targets,
                                          LayerHooks* hooks, const std::vector<Packing>& packing) {
  TORCH_CHECK(packing.empty() || packing.size() == idx.size(), "LossMany: ", packing.size(), " packings for ",
              idx.size(), " inputs");
  std::vector<PackedRows> rows;
  for (size_t m = 0; m < packing.size(); ++m) rows.push_back(MakePackedRows(packing[m], idx[m], 0));
  return LossManyBlockMajor(Passes(hooks), idx, targets, is_training(), hooks, rows);
}

void GptImpl::set_save_weight_leaves(bool on) {
  save_weight_leaves_ = on;
  for (const auto& m : *h) {
    auto* block = m->as<BlockImpl>();
    block->attn->save_weight_leaves = on;
    block->mlp->save_weight_leaves = on;
  }
}

void GptImpl::set_host_embedding(bool on, at::Device device, at::ScalarType dtype) {
  host_embedding_ = on;
  embedding_out_device_ = device;
  embedding_out_dtype_ = dtype;
}

at::Tensor GptImpl::Loss(const at::Tensor& idx, const at::Tensor& targets, LayerHooks* hooks, const Packing& packing) {
  return LossBlocks(Passes(hooks), idx, targets, hooks, MakePackedRows(packing, idx, /*sliding_window=*/0));
}

std::vector<BlockParameter> GptImpl::BlockParameters() const {
  std::vector<BlockParameter> out;
  const int last = num_blocks() - 1;
  const std::vector<int> wte_blocks = config_.tie_word_embeddings ? std::vector<int>{0, last} : std::vector<int>{0};
  out.push_back({"wte.weight", wte->weight, 0, wte_blocks});
  out.push_back({"wpe.weight", wpe->weight, 0, {0}});
  int block = 0;
  for (const auto& m : *h) {
    ++block;
    const std::string prefix = "h." + std::to_string(block - 1) + ".";
    for (const auto& item : m->named_parameters()) {
      out.push_back({prefix + item.key(), item.value(), block, {block}});
    }
  }
  out.push_back({"ln_f.weight", ln_f->weight, last, {last}});
  out.push_back({"ln_f.bias", ln_f->bias, last, {last}});
  if (!config_.tie_word_embeddings) out.push_back({"lm_head.weight", lm_head->weight, last, {last}});
  return out;
}

ParameterCounts GptImpl::CountParameters() const {
  ParameterCounts c;
  for (const auto& p : BlockParameters()) c.total_numel += p.tensor.numel();
  c.embedding_numel = wte->weight.numel() + wpe->weight.numel();
  c.non_embedding_numel = c.total_numel - c.embedding_numel;
  return c;
}

}  // namespace ps::models
