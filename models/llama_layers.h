// The layers of a Llama-family decoder block, with HF transformers' numerics
// (modeling_llama.py, modeling_qwen2/3.py, modeling_mistral.py):
//  - RmsNorm: x / sqrt(mean(x^2) + eps) in fp32, cast back to x's dtype, then x weight;
//  - Rotary: inverse frequencies 1 / theta^(2i/d) (scaled linear or llama3), cos/sin in
//    fp32 of the concatenated [freqs, freqs] ("split halves", rotate_half), cast to q's dtype;
//  - LlamaAttention: q/k/v/o projections (optional biases), optional per-head q/k RMSNorm
//    (Qwen3) before the rotation, grouped-query attention by at::scaled_dot_product_attention
//    (causal, or the mask of packed_rows.h: packed rows' block-diagonal mask and the
//    sliding window's band);
//  - LlamaMlp: down(silu(gate(x)) * up(x)).
// Parameters are allocated uninitialised (LlamaImpl initialises them, param_init.h).
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include "models/llama_config.h"

namespace ps::models {

class RmsNormImpl : public torch::nn::Module {
 public:
  RmsNormImpl(int64_t width, double eps);
  at::Tensor forward(const at::Tensor& x);  // [..., width] -> same shape and dtype promotion as HF

  at::Tensor weight;  // [width]

 private:
  double eps_;
};
TORCH_MODULE(RmsNorm);

// The rotary inverse frequencies of `config` (fp32, [head_dim / 2], CPU), scaling applied.
at::Tensor RotaryInverseFrequencies(const LlamaConfig& config);

// cos and sin for positions 0..T-1: each [T, head_dim] fp32 on `device`.
struct RotaryTables {
  at::Tensor cos, sin;
};
RotaryTables MakeRotaryTables(const at::Tensor& inv_freq, int64_t T, at::Device device);
// cos and sin at `position_ids` [B, T] int64 (packed rows: positions restart per
// example): each [B, 1, T, head_dim] fp32 on position_ids' device.
RotaryTables MakeRotaryTablesAt(const at::Tensor& inv_freq, const at::Tensor& position_ids);

// x * cos + rotate_half(x) * sin for x [B, heads, T, head_dim]; tables cast to x's dtype.
at::Tensor ApplyRotary(const at::Tensor& x, const RotaryTables& tables);

class LlamaAttentionImpl : public torch::nn::Module {
 public:
  explicit LlamaAttentionImpl(const LlamaConfig& config);
  // [B, T, C] -> [B, T, C]. `packed_mask`: PackedRows::attn_mask (the sliding window
  // already in it), or undefined: causal. Throws when T exceeds the sliding window and
  // no mask is given (MakePackedRows builds the window's band).
  at::Tensor forward(const at::Tensor& x, const RotaryTables& rope, const at::Tensor& packed_mask = {});

  torch::nn::Linear q_proj{nullptr};  // [n_head x head_dim, C]
  torch::nn::Linear k_proj{nullptr};  // [n_kv_head x head_dim, C]
  torch::nn::Linear v_proj{nullptr};  // [n_kv_head x head_dim, C]
  torch::nn::Linear o_proj{nullptr};  // [C, n_head x head_dim]
  RmsNorm q_norm{nullptr}, k_norm{nullptr};  // [head_dim], qk_norm only
  bool save_weight_leaves = false;           // LeafLinear instead of at::linear (chunk runtime)

 private:
  at::Tensor Heads(torch::nn::Linear& proj, RmsNorm& norm, const at::Tensor& x, int64_t heads);
  LlamaConfig config_;
};
TORCH_MODULE(LlamaAttention);

class LlamaMlpImpl : public torch::nn::Module {
 public:
  explicit LlamaMlpImpl(const LlamaConfig& config);
  at::Tensor forward(const at::Tensor& x);  // [B, T, C] -> [B, T, C]

  torch::nn::Linear gate_proj{nullptr}, up_proj{nullptr};  // [intermediate, C]
  torch::nn::Linear down_proj{nullptr};                    // [C, intermediate]
  bool save_weight_leaves = false;
};
TORCH_MODULE(LlamaMlp);

// Pre-norm block: h = x + attn(input_layernorm(x)); h + mlp(post_attention_layernorm(h)).
class LlamaBlockImpl : public torch::nn::Module {
 public:
  explicit LlamaBlockImpl(const LlamaConfig& config);
  at::Tensor forward(const at::Tensor& x, const RotaryTables& rope, const at::Tensor& packed_mask = {});

  RmsNorm input_layernorm{nullptr};
  LlamaAttention self_attn{nullptr};
  RmsNorm post_attention_layernorm{nullptr};
  LlamaMlp mlp{nullptr};
};
TORCH_MODULE(LlamaBlock);

}  // namespace ps::models
