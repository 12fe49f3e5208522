#include "models/llama_layers.h"

#include <ATen/ATen.h>

#include <cmath>

#include "models/lora.h"
#include "models/param_init.h"
#include "models/uninitialised_modules.h"

namespace ps::models {

RmsNormImpl::RmsNormImpl(int64_t width, double eps) : eps_(eps) {
  weight = register_parameter("weight", at::empty({width}, at::kFloat));
}

at::Tensor RmsNormImpl::forward(const at::Tensor& x) {
  const at::Tensor h = x.to(at::kFloat);
  const at::Tensor normed = h * at::rsqrt(h.pow(2).mean(-1, /*keepdim=*/true) + eps_);
  return weight * normed.to(x.scalar_type());  // HF: cast to the input dtype, then scale
}

at::Tensor RotaryInverseFrequencies(const LlamaConfig& c) {
  const int64_t d = c.head_width();
  // HF: 1 / base ** (arange(0, d, 2, int64).float() / d), in fp32.
  const at::Tensor exponent = at::arange(0, d, 2, at::kLong).to(at::kFloat) / static_cast<double>(d);
  at::Tensor inv_freq = 1.0 / at::pow(c.rope_theta, exponent);
  const RopeScaling& r = c.rope_scaling;
  switch (r.type) {
    case RopeScalingType::kNone:
      return inv_freq;
    case RopeScalingType::kLinear:
      return inv_freq / r.factor;
    case RopeScalingType::kLlama3: {
      const double old_context = static_cast<double>(r.original_max_position_embeddings);
      const double low_freq_wavelen = old_context / r.low_freq_factor;
      const double high_freq_wavelen = old_context / r.high_freq_factor;
      const at::Tensor wavelen = 2 * M_PI / inv_freq;
      // Long wavelengths (low frequencies) divided by the factor, short ones kept, the
      // ones between interpolated.
      at::Tensor scaled = at::where(wavelen > low_freq_wavelen, inv_freq / r.factor, inv_freq);
      const at::Tensor smooth = (old_context / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
      const at::Tensor smoothed = (1 - smooth) * scaled / r.factor + smooth * scaled;
      const at::Tensor medium = (wavelen >= high_freq_wavelen).logical_and(wavelen <= low_freq_wavelen);
      return at::where(medium, smoothed, scaled);
    }
  }
  TORCH_INTERNAL_ASSERT(false, "unknown rope scaling");
  return inv_freq;
}

RotaryTables MakeRotaryTables(const at::Tensor& inv_freq, int64_t T, at::Device device) {
  const at::Tensor positions = at::arange(T, at::TensorOptions().dtype(at::kFloat).device(device));
  const at::Tensor freqs = at::outer(positions, inv_freq.to(device));  // [T, d/2], fp32
  const at::Tensor emb = at::cat({freqs, freqs}, -1);                   // [T, d]
  return {emb.cos(), emb.sin()};
}

RotaryTables MakeRotaryTablesAt(const at::Tensor& inv_freq, const at::Tensor& position_ids) {
  // As MakeRotaryTables (at::outer is this product), per row.
  const at::Tensor freqs = position_ids.to(at::kFloat).unsqueeze(-1) * inv_freq.to(position_ids.device());  // [B, T, d/2]
  const at::Tensor emb = at::cat({freqs, freqs}, -1).unsqueeze(1);  // [B, 1, T, d]
  return {emb.cos(), emb.sin()};
}

at::Tensor ApplyRotary(const at::Tensor& x, const RotaryTables& t) {
  const int64_t half = x.size(-1) / 2;
  const at::Tensor rotated = at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
  return x * t.cos.to(x.scalar_type()) + rotated * t.sin.to(x.scalar_type());
}

LlamaAttentionImpl::LlamaAttentionImpl(const LlamaConfig& c) : config_(c) {
  const int64_t hd = c.head_width();
  q_proj = register_module("q_proj", UninitialisedLinear(c.n_embd, c.n_head * hd, c.qkv_bias));
  k_proj = register_module("k_proj", UninitialisedLinear(c.n_embd, c.kv_heads() * hd, c.qkv_bias));
  v_proj = register_module("v_proj", UninitialisedLinear(c.n_embd, c.kv_heads() * hd, c.qkv_bias));
  o_proj = register_module("o_proj", UninitialisedLinear(c.n_head * hd, c.n_embd, c.o_bias));
  if (c.qk_norm) {
    q_norm = register_module("q_norm", RmsNorm(hd, c.rms_norm_eps));
    k_norm = register_module("k_norm", RmsNorm(hd, c.rms_norm_eps));
  }
}

// proj(x) as [B, heads, T, head_dim], normalised per head when `norm` exists.
at::Tensor LlamaAttentionImpl::Heads(torch::nn::Linear& proj, RmsNorm& norm, const at::Tensor& x, int64_t heads) {
  at::Tensor y = ApplyLinear(proj, x, save_weight_leaves).view({x.size(0), x.size(1), heads, config_.head_width()});
  if (!norm.is_empty()) y = norm(y);
  return y.transpose(1, 2);
}

at::Tensor LlamaAttentionImpl::forward(const at::Tensor& x, const RotaryTables& rope, const at::Tensor& packed_mask) {
  const int64_t B = x.size(0), T = x.size(1);
  RmsNorm none{nullptr};
  const at::Tensor q = ApplyRotary(Heads(q_proj, q_norm, x, config_.n_head), rope);
  const at::Tensor k = ApplyRotary(Heads(k_proj, k_norm, x, config_.kv_heads()), rope);
  const at::Tensor v = Heads(v_proj, none, x, config_.kv_heads());
  TORCH_CHECK(packed_mask.defined() || config_.sliding_window <= 0 || T <= config_.sliding_window,
              "LlamaAttention: a sequence of ", T, " tokens needs the sliding window's mask (MakePackedRows)");
  std::optional<at::Tensor> mask;
  if (packed_mask.defined()) mask = packed_mask;
  const double p = is_training() ? config_.attention_dropout : 0.0;
  const at::Tensor y = at::scaled_dot_product_attention(q, k, v, mask, p, /*is_causal=*/!mask.has_value(),
                                                        /*scale=*/std::nullopt,
                                                        /*enable_gqa=*/config_.kv_heads() != config_.n_head);
  return ApplyLinear(o_proj, y.transpose(1, 2).reshape({B, T, -1}), save_weight_leaves);
}

LlamaMlpImpl::LlamaMlpImpl(const LlamaConfig& c) {
  gate_proj = register_module("gate_proj", UninitialisedLinear(c.n_embd, c.mlp_width(), /*bias=*/false));
  up_proj = register_module("up_proj", UninitialisedLinear(c.n_embd, c.mlp_width(), /*bias=*/false));
  down_proj = register_module("down_proj", UninitialisedLinear(c.mlp_width(), c.n_embd, /*bias=*/false));
}

at::Tensor LlamaMlpImpl::forward(const at::Tensor& x) {
  const at::Tensor gated = at::silu(ApplyLinear(gate_proj, x, save_weight_leaves)) * ApplyLinear(up_proj, x, save_weight_leaves);
  return ApplyLinear(down_proj, gated, save_weight_leaves);
}

LlamaBlockImpl::LlamaBlockImpl(const LlamaConfig& c) {
  input_layernorm = register_module("input_layernorm", RmsNorm(c.n_embd, c.rms_norm_eps));
  self_attn = register_module("self_attn", LlamaAttention(c));
  post_attention_layernorm = register_module("post_attention_layernorm", RmsNorm(c.n_embd, c.rms_norm_eps));
  mlp = register_module("mlp", LlamaMlp(c));
}

at::Tensor LlamaBlockImpl::forward(const at::Tensor& x, const RotaryTables& rope, const at::Tensor& packed_mask) {
  const at::Tensor h = x + self_attn->forward(input_layernorm(x), rope, packed_mask);
  return h + mlp->forward(post_attention_layernorm(h));
}

}  // namespace ps::models
