#include "models/sampling.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/autograd.h>

#include <algorithm>
#include <limits>

namespace ps::models {

at::Tensor FilterLogits(const at::Tensor& logits, int64_t top_k, double top_p) {
  TORCH_CHECK(logits.dim() == 1, "FilterLogits: logits must be [vocab], got ", logits.sizes());
  TORCH_CHECK(top_k >= 0, "top_k must be >= 0, got ", top_k);
  TORCH_CHECK(top_p > 0.0 && top_p <= 1.0, "top_p must be in (0, 1], got ", top_p);
  at::Tensor out = logits.to(at::kFloat).clone();
  const int64_t vocab = out.numel();
  const float neg_inf = -std::numeric_limits<float>::infinity();
  if ((top_k == 0 || top_k >= vocab) && top_p >= 1.0) return out;
  auto [sorted, order] = out.sort(/*stable=*/true, /*dim=*/0, /*descending=*/true);
  at::Tensor drop = at::zeros({vocab}, at::TensorOptions().dtype(at::kBool).device(out.device()));
  if (top_k > 0 && top_k < vocab) {
    const at::Tensor kth = sorted[top_k - 1];
    drop |= sorted < kth;  // ties with the k-th value stay
  }
  if (top_p < 1.0) {
    const at::Tensor probs = sorted.masked_fill(drop, neg_inf).softmax(0);
    // Drop a token when the tokens ranked above it already reach top_p.
    const at::Tensor above = probs.cumsum(0) - probs;
    drop |= above >= top_p;
  }
  drop[0] = false;  // the most likely token survives any setting
  return out.index_put_({order.masked_select(drop)}, at::scalar_tensor(neg_inf, out.options()));
}

int64_t NextToken(const at::Tensor& logits, const SamplingOptions& options, at::Generator& generator) {
  TORCH_CHECK(options.temperature >= 0.0, "temperature must be >= 0, got ", options.temperature);
  const at::Tensor host = logits.detach().to(at::kCPU, at::kFloat).reshape({-1});
  if (options.temperature == 0.0) return host.argmax().item<int64_t>();
  const at::Tensor filtered = FilterLogits(host / options.temperature, options.top_k, options.top_p);
  const at::Tensor probs = filtered.softmax(0);
  return at::multinomial(probs, 1, /*replacement=*/false, generator).item<int64_t>();
}

std::vector<int64_t> Generate(Gpt& model, const std::vector<int64_t>& prompt, const SamplingOptions& options,
                              at::Generator& generator, const std::function<void(int64_t)>& on_token) {
  TORCH_CHECK(!prompt.empty(), "the prompt has no tokens (give it some text)");
  const int64_t vocab = model->config().vocab_size;
  for (int64_t id : prompt) TORCH_CHECK(id >= 0 && id < vocab, "prompt token ", id, " is not < vocab_size ", vocab);
  torch::NoGradGuard no_grad;
  model->eval();
  const at::Device device = model->wte->weight.device();
  std::vector<int64_t> ids = prompt, generated;
  const int64_t window = model->config().n_positions;
  for (int64_t i = 0; i < options.max_new_tokens; ++i) {
    const int64_t begin = std::max<int64_t>(0, static_cast<int64_t>(ids.size()) - window);
    const at::Tensor idx =
        at::tensor(std::vector<int64_t>(ids.begin() + begin, ids.end()), at::kLong).unsqueeze(0).to(device);
    const at::Tensor logits = model->forward(idx).select(1, idx.size(1) - 1).squeeze(0);
    const int64_t next = NextToken(logits, options, generator);
    ids.push_back(next);
    generated.push_back(next);
    if (on_token) on_token(next);
    if (next == options.stop_token) break;
  }
  return generated;
}

}  // namespace ps::models
