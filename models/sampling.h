// Text generation with a Gpt: next-token choice (greedy, temperature, top-k, top-p) and
// the generation loop. No KV cache: every new token runs the model over the whole
// window (the last n_positions tokens), which is simple and exact; fine for looking at
// what a fine-tuned model writes, not for serving. Single-threaded use of one model.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "models/gpt.h"

namespace ps::models {

struct SamplingOptions {
  double temperature = 1.0;  // 0 = greedy (argmax); otherwise logits / temperature
  int64_t top_k = 0;         // keep the k most likely tokens; 0 = all
  double top_p = 1.0;        // keep the fewest tokens whose probability sums to >= top_p; 1 = all
  int64_t max_new_tokens = 64;
  int64_t stop_token = -1;   // stop after generating it (it is returned); -1 = none
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

// Appends up to max_new_tokens tokens to `prompt` (ids, non-empty); calls `on_token`
// with each new id as it is chosen (for streaming output). Returns the new ids.
std::vector<int64_t> Generate(Gpt& model, const std::vector<int64_t>& prompt, const SamplingOptions& options,
                              at::Generator& generator, const std::function<void(int64_t)>& on_token = nullptr);

}  // namespace ps::models
