// Gpt: GPT-2 on LibTorch (learned positions, pre-LN blocks, GELU-tanh MLP, causal
// scaled_dot_product_attention, dropout, optional tied embedding / LM head).
//
// Parameter names follow HF GPT-2 ("wte.weight", "h.0.attn.c_attn.weight", ...) but
// Linear weights are [out, in] (HF's Conv1D stores [in, out]; see hf_gpt2.h).
// Every block calls LayerHooks at its boundaries (see layer_hooks.h).
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>

#include <string>
#include <vector>

#include "models/block_parameter.h"
#include "models/block_passes.h"
#include "models/gpt_config.h"
#include "models/layer_hooks.h"
#include "models/packed_rows.h"
#include "models/param_init.h"

namespace ps::models {

// Causal multi-head self-attention ("attn.c_attn", "attn.c_proj").
class AttentionImpl : public torch::nn::Module {
 public:
  explicit AttentionImpl(const GptConfig& config);  // parameters uninitialised (GptImpl fills them)
  // [B, T, C] -> [B, T, C]; `mask`: PackedRows::attn_mask, or undefined (causal).
  at::Tensor forward(const at::Tensor& x, const at::Tensor& mask = {});

  torch::nn::Linear c_attn{nullptr};  // weight [3C, C]: q, k, v
  torch::nn::Linear c_proj{nullptr};  // weight [C, C]
  bool save_weight_leaves = false;    // LeafLinear instead of at::linear (chunk runtime)

 private:
  int64_t n_head_;
  double dropout_;
};
TORCH_MODULE(Attention);

// GELU-tanh MLP ("mlp.c_fc", "mlp.c_proj").
class MlpImpl : public torch::nn::Module {
 public:
  explicit MlpImpl(const GptConfig& config);
  at::Tensor forward(const at::Tensor& x);  // [B, T, C] -> [B, T, C]

  torch::nn::Linear c_fc{nullptr};    // weight [4C, C]
  torch::nn::Linear c_proj{nullptr};  // weight [C, 4C]
  bool save_weight_leaves = false;    // LeafLinear instead of at::linear (chunk runtime)
};
TORCH_MODULE(Mlp);

// Pre-LN transformer block: x + attn(ln_1(x)), then + mlp(ln_2(.)).
class BlockImpl : public torch::nn::Module {
 public:
  explicit BlockImpl(const GptConfig& config);
  at::Tensor forward(const at::Tensor& x, const at::Tensor& mask = {});  // [B, T, C] -> [B, T, C]; mask as Attention's

  torch::nn::LayerNorm ln_1{nullptr}, ln_2{nullptr};
  Attention attn{nullptr};
  Mlp mlp{nullptr};
  torch::nn::Dropout resid_dropout{nullptr};
};
TORCH_MODULE(Block);

class GptImpl : public torch::nn::Module {
 public:
  // Initialised (models/param_init.h), from a run seed drawn from LibTorch's default
  // generator (torch::manual_seed decides it).
  explicit GptImpl(const GptConfig& config);
  // Parameters allocated but not written: the trainer fills them with InitGptParameter,
  // in place (plain runs) or in their chunk slots (chunk runs).
  GptImpl(const GptConfig& config, Uninitialised);

  // idx: [B, T] int64 token ids (T <= n_positions) -> logits [B, T, vocab_size].
  // `packing` (packed_rows.h): several examples per row, the learned positions indexed by
  // its position_ids and attention confined to each segment; empty: ordinary rows.
  at::Tensor forward(const at::Tensor& idx, LayerHooks* hooks = nullptr, const Packing& packing = {});

  // Mean cross-entropy of next-token prediction over the counted targets; targets [B, T]
  // int64, -100 not counted (none counted: 0, with zero gradients). The LM head's logits
  // are never whole: config().loss_slice_tokens at a time (sliced_head.h).
  at::Tensor Loss(const at::Tensor& idx, const at::Tensor& targets, LayerHooks* hooks = nullptr,
                  const Packing& packing = {});

  // The losses of several micro-batches (train.accumulation_schedule: vertical), each
  // as Loss() would give it, computed block-major: the embeddings of every micro-batch,
  // then each block over every micro-batch (PreForward once per block, PostForward on
  // each output), then the head of each. One backward of their sum then runs block-major
  // too (docs/chunkmem.md, "Micro-batch order"). Needs activation checkpointing in
  // training (only the block inputs of all micro-batches are kept); the head and loss
  // are then recomputed in backward as well, one micro-batch at a time.
  // `packing`: one per micro-batch, or empty (none packed).
  std::vector<at::Tensor> LossMany(const std::vector<at::Tensor>& idx, const std::vector<at::Tensor>& targets,
                                   LayerHooks* hooks = nullptr, const std::vector<Packing>& packing = {});

  // All parameters in model (forward) order, each once, with its block id.
  std::vector<BlockParameter> BlockParameters() const;
  ParameterCounts CountParameters() const;
  int num_blocks() const { return static_cast<int>(config_.n_layer) + 2; }
  // Linear layers (and the tied LM head) save their weight leaves for backward instead
  // of views of the weights' storage (models/leaf_linear.h); the chunk runtime needs it.
  void set_save_weight_leaves(bool on);
  // Embeddings computed on the host in fp32 (PatrickStar use_cpu_embedding): the token
  // and position embeddings (both must live on the host), or only the position one when
  // the token embedding is tied to the LM head; the result goes to `device` in `dtype`.
  void set_host_embedding(bool on, at::Device device, at::ScalarType dtype);
  const GptConfig& config() const { return config_; }

  torch::nn::Embedding wte{nullptr}, wpe{nullptr};
  torch::nn::ModuleList h{nullptr};
  torch::nn::LayerNorm ln_f{nullptr};
  torch::nn::Linear lm_head{nullptr};  // only when !tie_word_embeddings
  torch::nn::Dropout drop{nullptr};

 private:
  at::Tensor Embed(const at::Tensor& idx, const PackedRows& rows);  // block 0 (no hooks)
  at::Tensor RunBlock(int block, const at::Tensor& x, const PackedRows& rows, LayerHooks* hooks);  // 1..n_layer
  at::Tensor Head(const at::Tensor& x);               // ln_f and the LM head: logits (no hooks)
  at::Tensor HeadLoss(const at::Tensor& x, const at::Tensor& targets);  // ln_f, the sliced head's loss
  bool recompute() const;                             // activation checkpointing applies now
  BlockPasses Passes(LayerHooks* hooks);              // Embed, RunBlock, Head for block_passes.h

  bool host_embedding_ = false;
  at::Device embedding_out_device_ = at::kCPU;
  at::ScalarType embedding_out_dtype_ = at::kFloat;
  bool save_weight_leaves_ = false;
  GptConfig config_;
};
TORCH_MODULE(Gpt);

// GPT-2's initial values of parameter `name` (as in GptImpl::BlockParameters()) for run
// seed `run_seed` (models/param_init.h): N(0, init_std) for embeddings, linear weights
// and the LM head; residual projections (attn.c_proj, mlp.c_proj) N(0, init_std /
// sqrt(2 n_layer)); LayerNorm weight 1, bias 0; biases 0. `values`: fp32, contiguous.
void InitGptParameter(const GptConfig& config, const std::string& name, at::Tensor values, uint64_t run_seed);

}  // namespace ps::models
