// Text generation with a decoder (causal_lm.h: Gpt, Llama): next-token choice (greedy,
// temperature, top-k, top-p) and the generation loop. With the KV cache (the default)
// the prompt is computed once, then each new token is one step over the cached keys and
// values (kv_cache.h). While the text fits in the model's n_positions that gives the
// same logits as rerunning the window, up to rounding; past n_positions (learned
// positions end there, and so does a Llama's max_position_embeddings) every further
// token reruns the window of the last n_positions tokens, exactly as `use_cache =
// false` does for every token (the reference path, simple and slow). Timings come back
// as data (GenerationStats). Single-threaded use of one model.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "models/causal_lm.h"

namespace ps::models {

struct SamplingOptions {
  double temperature = 1.0;  // 0 = greedy (argmax); otherwise logits / temperature
  int64_t top_k = 0;         // keep the k most likely tokens; 0 = all
  double top_p = 1.0;        // keep the fewest tokens whose probability sums to >= top_p; 1 = all
  int64_t max_new_tokens = 64;
  std::vector<int64_t> stop_tokens;  // stop after generating any of them (it is returned)
  // KV cache; false: every token reruns the model over the window (the last n_positions
  // tokens), the reference the cached path is tested against.
  bool use_cache = true;
};

// What a generation took. Prefill: the step over the prompt that chooses the first
// token; decode: each step after it (one token in, the next chosen). Wall-clock times
// around each step, which ends by reading the chosen id back (on a GPU, a sync).
struct GenerationStats {
  int64_t prompt_tokens = 0;  // the prompt's tokens the model ran over (at most n_positions)
  double prefill_s = 0;
  int64_t decode_tokens = 0;  // tokens generated after the first
  double decode_s = 0;
  // Steps that ran the model over the whole window: every step with use_cache off; with
  // it on, the steps past n_positions.
  int64_t window_steps = 0;
  bool stopped = false;  // a stop token ended it (else max_new_tokens did)

  double prefill_tokens_per_s() const { return prefill_s > 0 ? prompt_tokens / prefill_s : 0; }
  double decode_tokens_per_s() const { return decode_s > 0 ? decode_tokens / decode_s : 0; }
};

struct Generation {
  std::vector<int64_t> tokens;  // the new ids, a stop token included
  GenerationStats stats;
};

// `logits` [vocab] of one position with the tokens that top_k and top_p rule out set
// to -inf (ties at the k-th value are kept, as a stable sort ranks them). The most
// likely token always survives.
at::Tensor FilterLogits(const at::Tensor& logits, int64_t top_k, double top_p);

// The next token from `logits` [vocab] (any float dtype, any device): argmax when
// temperature is 0, else a draw from softmax(FilterLogits(logits / temperature)) with
// `generator` (a CPU generator: the draw happens on the host, so a seed gives the same
// text on CPU and CUDA up to the logits' rounding).
int64_t NextToken(const at::Tensor& logits, const SamplingOptions& options, at::Generator& generator);

// Appends up to max_new_tokens tokens to `prompt` (ids, non-empty, each < vocab_size);
// calls `on_token` with each new id as it is chosen (for streaming output). Runs under
// c10::InferenceMode; the KV cache is allocated once, for min(n_positions, prompt +
// max_new_tokens - 1) tokens.
Generation Generate(CausalLm& model, const std::vector<int64_t>& prompt, const SamplingOptions& options,
                    at::Generator& generator, const std::function<void(int64_t)>& on_token = nullptr);

}  // namespace ps::models
