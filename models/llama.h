// Llama: a Llama-family decoder on LibTorch (Llama 2/3.x, Qwen2/2.5, Qwen3, Mistral,
// SmolLM2, TinyLlama; layers in llama_layers.h), on the same contract as Gpt (gpt.h):
// block ids 0 = token embedding, 1..n_layer = decoder blocks, n_layer + 1 = final
// RMSNorm + LM head; LayerHooks at every block boundary; activation checkpointing by
// RecomputedCall; LossMany for the block-major (vertical) accumulation schedule.
//
// Parameter names are HF's without the "model." prefix: "embed_tokens.weight",
// "layers.0.self_attn.q_proj.weight", ..., "norm.weight", "lm_head.weight" (untied only).
// Linear weights are [out, in], as in HF.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <string>
#include <vector>

#include "models/block_passes.h"
#include "models/gpt.h"
#include "models/layer_hooks.h"
#include "models/llama_config.h"
#include "models/llama_layers.h"
#include "models/param_init.h"

namespace ps::models {

class LlamaImpl : public torch::nn::Module {
 public:
  // Initialised (InitLlamaParameter) from a run seed drawn from LibTorch's default generator.
  explicit LlamaImpl(const LlamaConfig& config);
  // Parameters allocated but not written (the engines fill them).
  LlamaImpl(const LlamaConfig& config, Uninitialised);

  // idx: [B, T] int64 token ids (T <= n_positions) -> logits [B, T, vocab_size].
  // `packing` (packed_rows.h): several examples per row, the rotation at its position_ids
  // and attention confined to each segment (and to the sliding window within it); empty:
  // ordinary rows.
  at::Tensor forward(const at::Tensor& idx, LayerHooks* hooks = nullptr, const Packing& packing = {});
  // Mean next-token cross-entropy over the counted targets; targets [B, T] int64 (-100:
  // not counted; none counted: 0, with zero gradients). The LM head's logits are never
  // whole: config().loss_slice_tokens at a time (sliced_head.h).
  at::Tensor Loss(const at::Tensor& idx, const at::Tensor& targets, LayerHooks* hooks = nullptr,
                  const Packing& packing = {});
  // Several micro-batches' losses computed block-major, as GptImpl::LossMany.
  std::vector<at::Tensor> LossMany(const std::vector<at::Tensor>& idx, const std::vector<at::Tensor>& targets,
                                   LayerHooks* hooks = nullptr, const std::vector<Packing>& packing = {});

  std::vector<BlockParameter> BlockParameters() const;
  ParameterCounts CountParameters() const;
  int num_blocks() const { return static_cast<int>(config_.n_layer) + 2; }
  void set_save_weight_leaves(bool on);
  // chunk.cpu_embedding: the token embedding is looked up on the host (when it is not
  // tied to the LM head, which stays on the device), the result sent to `device`/`dtype`.
  void set_host_embedding(bool on, at::Device device, at::ScalarType dtype);
  const LlamaConfig& config() const { return config_; }

  torch::nn::Embedding embed_tokens{nullptr};
  torch::nn::ModuleList layers{nullptr};
  RmsNorm norm{nullptr};
  torch::nn::Linear lm_head{nullptr};  // only when !tie_word_embeddings

 private:
  at::Tensor Embed(const at::Tensor& idx);  // block 0
  at::Tensor RunBlock(int block, const at::Tensor& x, const PackedRows& rows, LayerHooks* hooks);
  PackedRows Rows(const Packing& packing, const at::Tensor& idx) const;  // with the sliding window
  at::Tensor Head(const at::Tensor& x);  // final norm and LM head: logits
  at::Tensor HeadLoss(const at::Tensor& x, const at::Tensor& targets);  // final norm, the sliced head's loss
  bool recompute() const;
  BlockPasses Passes(LayerHooks* hooks);  // Embed, RunBlock, Head for block_passes.h

  at::Tensor inv_freq_;  // [head_dim / 2] fp32, CPU: the rotary frequencies, scaling applied
  bool host_embedding_ = false;
  at::Device embedding_out_device_ = at::kCPU;
  at::ScalarType embedding_out_dtype_ = at::kFloat;
  bool save_weight_leaves_ = false;
  LlamaConfig config_;
};
TORCH_MODULE(Llama);

// HF's initial values of parameter `name` for run seed `run_seed` (param_init.h): RMSNorm
// weights 1, biases 0, every other weight N(0, init_std). `values`: fp32, contiguous.
void InitLlamaParameter(const LlamaConfig& config, const std::string& name, at::Tensor values, uint64_t run_seed);

}  // namespace ps::models
