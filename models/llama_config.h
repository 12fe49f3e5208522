// LlamaConfig: the hyper-parameters of a Llama-family decoder (Llama 2/3.x, Qwen2/2.5,
// Qwen3, Mistral, SmolLM2, TinyLlama), owned by models/. Plain data; trainer/ fills it
// from YAML or an HF config.json (models/hf_llama.h), models/ only reads it.
// Field comments name the HF config.json field each one mirrors.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "models/gpt_config.h"

namespace ps::models {

// How the rotary frequencies are rescaled for long contexts (HF rope_scaling /
// rope_parameters "rope_type"). Others (yarn, dynamic, longrope) are refused.
enum class RopeScalingType { kNone, kLinear, kLlama3 };
const char* ToString(RopeScalingType type);

struct RopeScaling {
  RopeScalingType type = RopeScalingType::kNone;
  double factor = 1.0;            // "factor": linear divides every frequency; llama3 the low ones
  double low_freq_factor = 1.0;   // llama3 "low_freq_factor"
  double high_freq_factor = 4.0;  // llama3 "high_freq_factor"
  int64_t original_max_position_embeddings = 8192;  // llama3: the pre-training context
};

struct LlamaConfig {
  int64_t n_layer = 2;             // num_hidden_layers
  int64_t n_head = 4;              // num_attention_heads
  int64_t n_kv_head = 0;           // num_key_value_heads; 0 = n_head; must divide n_head (1 = MQA)
  int64_t n_embd = 128;            // hidden_size
  int64_t head_dim = 0;            // head_dim; 0 = n_embd / n_head
  int64_t intermediate_size = 0;   // SwiGLU width; 0 = 4 x n_embd
  int64_t n_positions = 256;       // max_position_embeddings (longest sequence accepted)
  int64_t vocab_size = 256;        // vocab_size
  double rms_norm_eps = 1e-5;      // rms_norm_eps
  double rope_theta = 10000.0;     // rope_theta (or rope_parameters.rope_theta)
  RopeScaling rope_scaling;        // rope_scaling (or rope_parameters)
  bool qkv_bias = false;           // q/k/v projections have biases (Qwen2; attention_bias)
  bool o_bias = false;             // o_proj has a bias (Llama's attention_bias)
  bool qk_norm = false;            // per-head RMSNorm of q and k before the rotation (Qwen3)
  int64_t sliding_window = 0;      // > 0: each token attends to at most this many (Mistral)
  double attention_dropout = 0.0;  // attention_dropout (training only)
  double init_std = 0.02;          // initializer_range: N(0, std) for weights and embeddings
  bool tie_word_embeddings = false;  // LM head shares the token embedding
  // Recompute each block's activations in backward instead of keeping them.
  bool activation_checkpointing = false;
  int64_t loss_slice_tokens = 0;  // tokens per LM-head slice of the losses; 0 = LossSliceTokens' default

  int64_t head_width() const { return head_dim > 0 ? head_dim : n_embd / n_head; }
  int64_t kv_heads() const { return n_kv_head > 0 ? n_kv_head : n_head; }
  int64_t mlp_width() const { return intermediate_size > 0 ? intermediate_size : 4 * n_embd; }
};

// A published shape (its HF config.json), for model.preset and `--plan`.
struct LlamaPreset {
  std::string name;
  LlamaConfig config;
};
const std::vector<LlamaPreset>& LlamaPresets();
std::optional<LlamaPreset> FindLlamaPreset(const std::string& name);

// The parameters `config` builds, in the order of LlamaImpl::BlockParameters(), without
// building them (names as in llama.h). Counts in checked int64 (c10::Error on overflow).
std::vector<ParameterShape> LlamaParameterShapes(const LlamaConfig& config);
int64_t LlamaParameterCount(const LlamaConfig& config);

// Estimated peak activation bytes of one training micro-batch of `tokens` tokens in
// `element_bytes`, from what a block saves for backward: per token about 6 x n_embd
// (two norms' inputs and outputs, residuals), q/k/v/attention output (2 x n_head + 2 x
// n_kv_head heads of head_dim) and 4 x intermediate_size (gate, up, silu, product);
// with activation checkpointing n_embd per block plus one block recomputed; one slice of
// the LM head's logits as in gpt_config.h. `micro_batches_kept` as in gpt_config.h.
int64_t EstimateLlamaActivationBytes(const LlamaConfig& config, int64_t tokens, int64_t element_bytes,
                                     int64_t micro_batches_kept = 1);

// Checks shapes and settings; throws c10::Error naming the "model." key at fault.
void ValidateLlamaConfig(const LlamaConfig& config);

}  // namespace ps::models
