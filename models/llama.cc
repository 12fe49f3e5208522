#include "models/llama.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/nn/functional/loss.h>

#include <functional>

#include "models/leaf_linear.h"
#include "models/recompute.h"

namespace ps::models {
namespace F = torch::nn::functional;

namespace {
bool EndsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

at::Tensor MeanCrossEntropy(const at::Tensor& logits, const at::Tensor& targets) {
  return F::cross_entropy(logits.reshape({-1, logits.size(-1)}).to(at::kFloat), targets.reshape({-1}));
}
}  // namespace

void InitLlamaParameter(const LlamaConfig& config, const std::string& name, at::Tensor values, uint64_t run_seed) {
  CheckInitValues(name, values);
  at::NoGradGuard no_grad;
  if (EndsWith(name, "norm.weight") || EndsWith(name, "layernorm.weight")) {
    values.fill_(1.0);
  } else if (EndsWith(name, ".bias")) {
    values.zero_();
  } else {
    FillNormal(values, config.init_std, run_seed, name);
  }
}

LlamaImpl::LlamaImpl(const LlamaConfig& config) : LlamaImpl(config, kUninitialised) {
  const uint64_t seed = SeedFromDefaultGenerator();
  InitParameters(BlockParameters(), InitPlan{seed, {}}, [&](const std::string& name, at::Tensor values) {
    InitLlamaParameter(config_, name, std::move(values), seed);
  });
}

LlamaImpl::LlamaImpl(const LlamaConfig& config, Uninitialised) : config_(config) {
  ValidateLlamaConfig(config_);
  const auto& c = config_;
  inv_freq_ = RotaryInverseFrequencies(c);
  embed_tokens = register_module("embed_tokens", UninitialisedEmbedding(c.vocab_size, c.n_embd));
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.n_layer; ++i) layers->push_back(LlamaBlock(c));
  norm = register_module("norm", RmsNorm(c.n_embd, c.rms_norm_eps));
  if (!c.tie_word_embeddings) {
    lm_head = register_module("lm_head", UninitialisedLinear(c.n_embd, c.vocab_size, /*bias=*/false));
  }
}

bool LlamaImpl::recompute() const {
  return config_.activation_checkpointing && is_training() && at::GradMode::is_enabled();
}

at::Tensor LlamaImpl::Embed(const at::Tensor& idx) {
  TORCH_CHECK(idx.size(1) <= config_.n_positions, "sequence length ", idx.size(1),
              " exceeds model.n_positions (max_position_embeddings) ", config_.n_positions);
  if (host_embedding_ && !config_.tie_word_embeddings) {
    return embed_tokens(idx.to(at::kCPU)).to(embedding_out_device_, embedding_out_dtype_);
  }
  return embed_tokens(idx);
}

at::Tensor LlamaImpl::RunBlock(int block, const at::Tensor& x, LayerHooks* hooks) {
  auto* impl = layers[block - 1]->as<LlamaBlockImpl>();
  const at::Tensor inv_freq = inv_freq_;
  auto run = [impl, inv_freq](const at::Tensor& in) {
    return impl->forward(in, MakeRotaryTables(inv_freq, in.size(1), in.device()));
  };
  if (!recompute()) return run(x);
  return RecomputedCall(x, run, [hooks, block] {  // `hooks` may be null (see GptImpl::RunBlock)
    if (hooks) hooks->PreForward(block);
  });
}

at::Tensor LlamaImpl::Head(const at::Tensor& x) {
  const at::Tensor y = norm(x);
  if (config_.tie_word_embeddings) {
    return save_weight_leaves_ ? LeafLinear(y, embed_tokens->weight, {}) : F::linear(y, embed_tokens->weight);
  }
  return ApplyLinear(lm_head, y, save_weight_leaves_);
}

at::Tensor LlamaImpl::forward(const at::Tensor& idx, LayerHooks* hooks) {
  LayerHooks none;
  LayerHooks& hk = hooks ? *hooks : none;
  int block = 0;
  hk.PreForward(block);
  at::Tensor x = hk.PostForward(block, Embed(idx));
  for (++block; block <= config_.n_layer; ++block) {
    hk.PreForward(block);
    x = hk.PostForward(block, RunBlock(block, x, hooks));
  }
  hk.PreForward(block);
  return hk.PostForward(block, Head(x));
}

at::Tensor LlamaImpl::Loss(const at::Tensor& idx, const at::Tensor& targets, LayerHooks* hooks) {
  return MeanCrossEntropy(forward(idx, hooks), targets);
}

std::vector<at::Tensor> LlamaImpl::LossMany(const std::vector<at::Tensor>& idx, const std::vector<at::Tensor>& targets,
                                            LayerHooks* hooks) {
  TORCH_CHECK(!idx.empty() && idx.size() == targets.size(), "LossMany: ", idx.size(), " inputs for ", targets.size(),
              " targets");
  TORCH_CHECK(config_.activation_checkpointing || !at::GradMode::is_enabled() || !is_training(),
              "LossMany (train.accumulation_schedule: vertical) needs model.activation_checkpointing: true in "
              "training: it keeps every micro-batch's block inputs, and only those");
  LayerHooks none;
  LayerHooks& hk = hooks ? *hooks : none;
  const size_t k = idx.size();
  std::vector<at::Tensor> x(k);
  // Each block once for every micro-batch; outputs wrapped after all ran (GptImpl::LossMany).
  auto each = [&](int block, const std::function<at::Tensor(size_t)>& run) {
    hk.PreForward(block);
    for (size_t m = 0; m < k; ++m) x[m] = run(m);
    for (size_t m = 0; m < k; ++m) x[m] = hk.PostForward(block, x[m]);
  };
  each(0, [&](size_t m) { return Embed(idx[m]); });
  for (int block = 1; block <= config_.n_layer; ++block) {
    each(block, [&](size_t m) { return RunBlock(block, x[m], hooks); });
  }
  const int last = num_blocks() - 1;
  each(last, [&](size_t m) {
    if (!recompute()) return MeanCrossEntropy(Head(x[m]), targets[m]);
    const at::Tensor t = targets[m];  // the head runs again in backward, one micro-batch at a time
    return RecomputedCall(
        x[m], [this, t](const at::Tensor& in) { return MeanCrossEntropy(Head(in), t); },
        [hooks, last] {
          if (hooks) hooks->PreForward(last);
        });
  });
  return x;
}

void LlamaImpl::set_save_weight_leaves(bool on) {
  save_weight_leaves_ = on;
  for (const auto& m : *layers) {
    auto* block = m->as<LlamaBlockImpl>();
    block->self_attn->save_weight_leaves = on;
    block->mlp->save_weight_leaves = on;
  }
}

void LlamaImpl::set_host_embedding(bool on, at::Device device, at::ScalarType dtype) {
  host_embedding_ = on;
  embedding_out_device_ = device;
  embedding_out_dtype_ = dtype;
}

std::vector<BlockParameter> LlamaImpl::BlockParameters() const {
  std::vector<BlockParameter> out;
  const int last = num_blocks() - 1;
  out.push_back({"embed_tokens.weight", embed_tokens->weight, 0,
                 config_.tie_word_embeddings ? std::vector<int>{0, last} : std::vector<int>{0}});
  int block = 0;
  for (const auto& m : *layers) {
    ++block;
    const std::string prefix = "layers." + std::to_string(block - 1) + ".";
    for (const auto& item : m->named_parameters()) out.push_back({prefix + item.key(), item.value(), block, {block}});
  }
  out.push_back({"norm.weight", norm->weight, last, {last}});
  if (!config_.tie_word_embeddings) out.push_back({"lm_head.weight", lm_head->weight, last, {last}});
  return out;
}

ParameterCounts LlamaImpl::CountParameters() const {
  ParameterCounts c;
  for (const auto& p : BlockParameters()) c.total_numel += p.tensor.numel();
  c.embedding_numel = embed_tokens->weight.numel();
  c.non_embedding_numel = c.total_numel - c.embedding_numel;
  return c;
}

}  // namespace ps::models
