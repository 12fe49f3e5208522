// HF Llama-family folders in: the config.json of LlamaForCausalLM, Qwen2ForCausalLM,
// Qwen3ForCausalLM and MistralForCausalLM, and their weights (one model.safetensors, or
// the shards model.safetensors.index.json lists) mapped onto ps::models::Llama parameter
// names (HF's without the "model." prefix). Errors name the file, the field and its value.
#pragma once

#include <string>

#include "models/llama_config.h"
#include "models/safetensors.h"

namespace ps::models {

// The architectures (config.json "architectures") this reader accepts.
bool IsHfLlamaArchitecture(const std::string& architecture);

// The architecture a folder's config.json names ("" when it has none or no config.json).
std::string ReadHfArchitecture(const std::string& folder);

// The LlamaConfig of an HF folder's config.json: num_hidden_layers, num_attention_heads,
// num_key_value_heads, hidden_size, head_dim, intermediate_size, max_position_embeddings,
// vocab_size, rms_norm_eps, rope_theta and rope_scaling (or transformers 5's
// rope_parameters; types default, linear and llama3), attention_bias (Qwen2: q/k/v
// biases always), Qwen3's q/k norms, Mistral's sliding_window, attention_dropout,
// initializer_range, tie_word_embeddings. Throws c10::Error naming the file, the field and
// the value for what this model does not implement: another architecture, hidden_act
// other than silu, mlp_bias, rope types such as yarn or dynamic, partial rotary, Qwen's
// use_sliding_window or non-full layer_types, MoE fields (num_experts, num_local_experts,
// ...), quantization_config.
LlamaConfig ReadHfLlamaConfig(const std::string& folder);

// The weights of an HF Llama-family folder as `config`'s parameters, by ps name, as
// memory-mapped views in their stored dtype (bf16/fp16/fp32; the caller converts while
// copying, one tensor at a time). Every parameter must be present with its shape; a tied
// lm_head.weight and rotary inv_freq buffers are ignored; another key is an error naming
// it and its file.
TensorMap MapHfLlamaWeights(const std::string& folder, const LlamaConfig& config);

}  // namespace ps::models
