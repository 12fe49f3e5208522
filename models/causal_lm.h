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
// On the CPU its linear weights and LM head are laid out for one-token steps first
// (UseRowVectorLayout): the model's values are unchanged, its storage is.
std::unique_ptr<CausalLm> MakeCausalLm(Gpt model);
std::unique_ptr<CausalLm> MakeCausalLm(Llama model);

// Re-lays each weight [out, in] as the transpose of a contiguous [in, out] tensor (the
// parameter keeps its shape and values, now a view; the old storage is freed). For one
// token, x W^T then reads W row after row of `out` outputs, which MKL's CPU kernels
// stream faster than the [out, in] layout's dot products: 15% less time for the
// weights of a 100M-parameter Llama step on a 2-core EPYC, the LM head 1.5x (measured
// with torch 2.11's MKL; docs/benchmarks.md). Prompts (many tokens) run as fast either
// way. Not for training: the chunk runtime expects contiguous parameters.
void UseRowVectorLayout(const std::vector<at::Tensor>& weights);

}  // namespace ps::models
