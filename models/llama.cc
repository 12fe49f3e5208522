#include "models/llama.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/nn/functional/loss.h>

#include <functional>

#include "models/block_passes.h"
#include "models/leaf_linear.h"
#include "models/lora.h"
#include "models/recompute.h"
#include "models/sliced_head.h"
#include "models/uninitialised_modules.h"

namespace ps::models {
namespace F = torch::nn::functional;

namespace {
bool EndsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
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

at::Tensor LlamaImpl::RunBlock(int block, const at::Tensor& x, const PackedRows& rows, LayerHooks* hooks) {
  auto* impl = layers[block - 1]->as<LlamaBlockImpl>();
  const at::Tensor inv_freq = inv_freq_;
  const at::Tensor pos = rows.position_ids, mask = rows.attn_mask;
  auto run = [impl, inv_freq, pos, mask](const at::Tensor& in) {
    const RotaryTables rope =
        pos.defined() ? MakeRotaryTablesAt(inv_freq, pos) : MakeRotaryTables(inv_freq, in.size(1), in.device());
    return impl->forward(in, rope, mask);
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

at::Tensor LlamaImpl::HeadLoss(const at::Tensor& x, const at::Tensor& targets) {
  const at::Tensor& w = config_.tie_word_embeddings ? embed_tokens->weight : lm_head->weight;
  return SlicedCrossEntropy(norm(x), w, {}, targets, LossSliceTokens(config_.loss_slice_tokens, config_.vocab_size));
}

BlockPasses LlamaImpl::Passes(LayerHooks* hooks) {
  BlockPasses p;
  p.n_layer = static_cast<int>(config_.n_layer);
  p.recompute = recompute();
  p.embed = [this](const at::Tensor& idx, const PackedRows& /*rows*/) { return Embed(idx); };  // rotary positions
  p.run_block = [this, hooks](int block, const at::Tensor& x, const PackedRows& rows) {
    return RunBlock(block, x, rows, hooks);
  };
  p.head = [this](const at::Tensor& x) { return Head(x); };
  p.head_loss = [this](const at::Tensor& x, const at::Tensor& targets) { return HeadLoss(x, targets); };
  return p;
}

PackedRows LlamaImpl::Rows(const Packing& packing, const at::Tensor& idx) const {
  return MakePackedRows(packing, idx, config_.sliding_window);
}

at::Tensor LlamaImpl::forward(const at::Tensor& idx, LayerHooks* hooks, const Packing& packing) {
  return ForwardBlocks(Passes(hooks), idx, hooks, Rows(packing, idx));
}

at::Tensor LlamaImpl::Loss(const at::Tensor& idx, const at::Tensor& targets, LayerHooks* hooks,
                           const Packing& packing) {
  return LossBlocks(Passes(hooks), idx, targets, hooks, Rows(packing, idx));
}

std::vector<at::Tensor> LlamaImpl::LossMany(const std::vector<at::Tensor>& idx, const std::vector<at::Tensor>& targets,
                                            LayerHooks* hooks, const std::vector<Packing>& packing) {
  TORCH_CHECK(packing.empty() || packing.size() == idx.size(), "LossMany: ", packing.size(), " packings for ",
              idx.size(), " inputs");
  std::vector<PackedRows> rows;  // one per input even unpacked: a row longer than the window has its band mask
  for (size_t m = 0; m < idx.size(); ++m) rows.push_back(Rows(packing.empty() ? Packing{} : packing[m], idx[m]));
  return LossManyBlockMajor(Passes(hooks), idx, targets, is_training(), hooks, rows);
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
