// GptConfig: the GPT-2 architecture hyper-parameters, owned by models/.
// Plain data; trainer/ fills it from YAML, models/ only reads it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ps::models {

struct GptConfig {
  // Named size ("gpt2-124m", "GPT2_1B", ...); fills the shape fields below that the
  // config does not set explicitly. Empty: the shape fields are used as given.
  std::string preset;
  // A local HF GPT-2 model folder (config.json + model.safetensors, or a sharded
  // model.safetensors.index.json) whose weights start the run; its config.json gives the
  // shape keys left unset, and shape keys set must equal it. Empty: random init.
  std::string init_from;
  int64_t n_layer = 2;          // transformer blocks
  int64_t n_head = 4;           // attention heads; must divide n_embd
  int64_t n_embd = 128;         // hidden width
  int64_t n_positions = 256;    // learned position table length (max sequence)
  int64_t vocab_size = 256;     // token ids must be < vocab_size
  double dropout = 0.0;         // embedding, attention and residual dropout
  double layer_norm_eps = 1e-5;
  double init_std = 0.02;       // N(0, std) init; residual projections / sqrt(2 n_layer)
  bool tie_word_embeddings = true;  // LM head shares the token embedding
  // Recompute each transformer block's activations in backward instead of keeping them
  // (trades one extra forward per block for activation memory).
  bool activation_checkpointing = false;
  // Tokens per slice of the LM head and cross-entropy of training losses (the logits
  // are never whole, models/sliced_head.h); 0 = LossSliceTokens' default.
  int64_t loss_slice_tokens = 0;
};

// The tokens per LM-head slice that `setting` (model.loss_slice_tokens) gives: itself
// when > 0; 0: as many as keep one slice's fp32 logits within 256 MiB (2^26 / vocab
// tokens, rounded down to a multiple of 64 from 64 up: 512 for Llama 3's 128,256, 1280
// for GPT-2's 50,257), at least 1. Larger slices run faster; each costs its logits.
int64_t LossSliceTokens(int64_t setting, int64_t vocab_size);

// The sliced head's most bytes per logit of a slice, in any compute dtype: the fp32
// logits and one fp32 temporary as large (the compute-dtype logits, freed once cast,
// and the gradient's compute-dtype copy fit within). The estimates below count it.
constexpr int64_t kSlicedLogitBytes = 8;

// One entry of the model zoo: GPT-2 sizes and PatrickStar's examples/model_builder.py.
struct GptPreset {
  std::string name;
  int64_t n_layer;
  int64_t n_head;
  int64_t n_embd;
  int64_t n_positions;
  int64_t vocab_size;
};

const std::vector<GptPreset>& GptPresets();
std::optional<GptPreset> FindGptPreset(const std::string& name);

// A parameter of the GPT a config describes, known without building it: name, element
// count and the blocks that use it, in the order of GptImpl::BlockParameters().
// These size functions count in int64 with checked arithmetic: a shape whose counts
// overflow throws c10::Error naming the shape keys.
struct ParameterShape {
  std::string name;
  int64_t numel;
  std::vector<int> used_by_blocks;
  bool frozen = false;  // trains nothing (LoRA's base: trainer/engine/model_factory.h)
};
std::vector<ParameterShape> GptParameterShapes(const GptConfig& config);

// Parameter count of the GPT a config describes, without building it (each tensor
// once; a tied LM head is not counted twice).
int64_t GptParameterCount(const GptConfig& config);

// Estimated peak bytes of activations (non-model memory) of one training micro-batch
// of `tokens` (= micro-batch x sequence length) in `element_bytes` (4 fp32, 2 bf16/fp16),
// from what this GPT saves for backward: per block and token about 17 x n_embd
// elements (layer-norm and linear inputs, q/k/v and attention output, the 4 x n_embd
// MLP hidden before and after GELU; attention scores are not kept, SDPA uses
// memory-efficient kernels), or with activation checkpointing n_embd per block plus
// one block recomputed; plus embeddings and ln_f, and one slice of the LM head's logits
// (LossSliceTokens, at most `tokens`; kSlicedLogitBytes per logit). An estimate for planning
// (`ps_train --plan`); the warm-up trace measures the real peak.
// `micro_batches_kept` > 1 (train.accumulation_schedule: vertical, which needs
// checkpointing): the block inputs, embeddings and ln_f of that many micro-batches of
// `tokens` each, plus one block recomputed and one slice of logits.
int64_t EstimateActivationBytes(const GptConfig& config, int64_t tokens, int64_t element_bytes,
                                int64_t micro_batches_kept = 1);

// Checks shapes (positive sizes, n_head divides n_embd); throws c10::Error naming
// the offending field with the "model." prefix.
void ValidateGptConfig(const GptConfig& config);

}  // namespace ps::models
