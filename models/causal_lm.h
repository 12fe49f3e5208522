// CausalLm: what text generation (sampling.h) needs of a decoder-only model, Gpt or
// Llama: the logits of a window of tokens computed from scratch (the model's forward),
// and the logits of new tokens placed after those a KvCache holds, which the step
// extends. The cached step runs the model's own layers (their parameters, norms,
// projections and rotary tables) with the attention of kv_cache.h; its logits equal
// the forward's last position up to rounding (tests/models/kv_cache_test.cc).
//
// Inference only: no autograd (callers hold at::NoGradGuard or c10::InferenceMode),
// dropout off. The CausalLm shares the model (a module holder) and is used by one
// thread at a time.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "models/gpt.h"
#include "models/kv_cache.h"
#include "models/llama.h"

namespace ps::models {

class CausalLm {
 public:
  virtual ~CausalLm() = default;

  virtual int64_t vocab_size() const = 0;
  // The longest sequence the model takes (GPT-2's learned positions; Llama's
  // max_position_embeddings): a cache never holds more.
  virtual int64_t n_positions() const = 0;
  virtual at::Device device() const = 0;

  // Logits [1, T, vocab] of ids [1, T] (int64, T <= n_positions) from position 0,
  // without a cache: the model's forward.
  virtual at::Tensor Forward(const at::Tensor& ids) = 0;

  // An empty cache for up to `capacity_tokens` tokens (1..n_positions), on the model's
  // device in its dtype.
  virtual KvCache NewCache(int64_t capacity_tokens) const = 0;

  // The logits [vocab] of the last of ids [1, T] (T >= 1), which take positions
  // cache.length()..cache.length()+T-1 after the cached tokens; their keys and values
  // are appended to `cache` (cache.length() grows by T). A prompt is one step; each
  // generated token another. c10::Error when the cache has no room for T more tokens.
  virtual at::Tensor Step(const at::Tensor& ids, KvCache& cache) = 0;
};

// The model in eval mode behind the CausalLm interface (gpt_decode.cc, llama_decode.cc).
// Its linear weights are packed for one-token steps first (PackWeights; Llama's q/k/v
// and gate/up each into one): the model's values are unchanged, their storage is not.
std::unique_ptr<CausalLm> MakeCausalLm(Gpt model);
std::unique_ptr<CausalLm> MakeCausalLm(Llama model);

// Packs `weights` (each [out_i, in], one `in`, one device) into one tensor and re-points
// each parameter to its rows of it (a view: shape and values unchanged, the old storage
// freed); returns the packed weight [sum of out_i, in], for one at::linear where there
// were several. On the CPU the storage is the transpose, [in, sum of out_i] contiguous:
// for one token x W^T then streams W row after row, which MKL runs faster than the dot
// products of the [out, in] layout (docs/benchmarks.md, "Sampling"); prompts (many
// tokens) run as fast either way. Not for training: the chunk runtime expects
// contiguous parameters of their own.
at::Tensor PackWeights(const std::vector<at::Tensor>& weights);
// The same for biases (each [out_i]); an undefined tensor when `biases` are undefined.
at::Tensor PackBiases(const std::vector<at::Tensor>& biases);

}  // namespace ps::models
