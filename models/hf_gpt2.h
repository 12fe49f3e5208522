// HF GPT-2 folders, in and out: the config.json of GPT2LMHeadModel, its weights (one
// model.safetensors, or shards listed by model.safetensors.index.json), and the mapping
// between HF names/layouts ("transformer." prefix; Conv1D weights stored [in, out]) and
// ps::models::Gpt parameters (Linear weights [out, in]).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "models/gpt.h"
#include "models/gpt_config.h"
#include "models/hf_folder.h"  // HfExportOptions
#include "models/safetensors.h"

namespace ps::models {

// The shape an HF GPT-2 config.json gives: n_layer, n_head, n_embd, n_positions,
// vocab_size, layer_norm_eps (layer_norm_epsilon), tie_word_embeddings; the other
// fields keep GptConfig's defaults. Throws c10::Error naming the file and key for a
// missing or malformed key, a model_type other than gpt2, or a variant this GPT does not
// implement (activation_function other than gelu_new, n_inner other than 4 x n_embd,
// scale_attn_by_inverse_layer_idx, reorder_and_upcast_attn, no attention scaling).
GptConfig ReadHfGpt2Config(const std::string& folder);

// The end-of-text token id an HF config.json names (eos_token_id), or -1.
int64_t ReadHfEosTokenId(const std::string& folder);

// The weights of an HF GPT-2 folder as `config`'s parameters would hold them, by
// ps::models::Gpt parameter name ("h.0.attn.c_attn.weight", ...): views into memory
// maps of the safetensors files (Conv1D weights as transposed views), so taking them
// one at a time copies one tensor at a time. Every parameter must be present with its
// shape; the causal-mask buffers (attn.bias, attn.masked_bias) and a tied
// lm_head.weight are ignored; another key is an error naming it and its file.
TensorMap MapHfGpt2Weights(const std::string& folder, const GptConfig& config);

// Copies HF GPT-2 weights (HF names, as a state dict) into `model`; the same checks.
void LoadHfGpt2(Gpt& model, const std::map<std::string, at::Tensor>& hf_state);

// `params` (ps names, any floating dtype, any device) as an HF state dict: HF names,
// Conv1D weights transposed back to [in, out], contiguous fp32 CPU tensors; a tied LM
// head is not written (HF restores it from wte).
TensorMap ToHfGpt2StateDict(const TensorMap& params, const GptConfig& config);

// Writes `folder`/config.json and the weights (model.safetensors, or
// model-0000i-of-0000n.safetensors + model.safetensors.index.json above
// max_shard_bytes) for `params` (ps names). Returns the files written (names only).
// The folder must exist; existing files of these names are replaced.
std::vector<std::string> WriteHfGpt2Weights(const std::string& folder, const TensorMap& params,
                                            const GptConfig& config, const HfExportOptions& options);

}  // namespace ps::models
