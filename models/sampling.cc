#include "models/sampling.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <optional>

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
  const at::Tensor scaled = host / options.temperature;
  // A temperature so small that the logits overflow (or it rounds to 0 in fp32): its
  // limit, the argmax.
  if ((scaled.isnan() | scaled.isposinf()).any().item<bool>()) return host.argmax().item<int64_t>();
  const at::Tensor filtered = FilterLogits(scaled, options.top_k, options.top_p);
  const at::Tensor probs = filtered.softmax(0);
  return at::multinomial(probs, 1, /*replacement=*/false, generator).item<int64_t>();
}

namespace {

using Clock = std::chrono::steady_clock;

// The logits [vocab] after `ids`: one cached step over the ids the cache lacks while
// they fit in it, else the model over the last n_positions ids from scratch.
at::Tensor NextLogits(CausalLm& model, const std::vector<int64_t>& ids, std::optional<KvCache>& cache,
                      GenerationStats& stats) {
  const int64_t n = static_cast<int64_t>(ids.size());
  const auto to_tensor = [&](int64_t begin) {
    return at::tensor(at::ArrayRef<int64_t>(ids.data() + begin, n - begin), at::kLong).unsqueeze(0).to(model.device());
  };
  if (cache && n <= cache->capacity()) return model.Step(to_tensor(cache->length()), *cache);
  ++stats.window_steps;
  const at::Tensor window = to_tensor(std::max<int64_t>(0, n - model.n_positions()));
  return model.Forward(window).select(1, window.size(1) - 1).squeeze(0);
}

}  // namespace

Generation Generate(CausalLm& model, const std::vector<int64_t>& prompt, const SamplingOptions& options,
                    at::Generator& generator, const std::function<void(int64_t)>& on_token) {
  TORCH_CHECK(!prompt.empty(), "the prompt has no tokens (give it some text)");
  TORCH_CHECK(options.max_new_tokens >= 0, "max_new_tokens must be >= 0, got ", options.max_new_tokens);
  const int64_t vocab = model.vocab_size(), window = model.n_positions();
  for (int64_t id : prompt) TORCH_CHECK(id >= 0 && id < vocab, "prompt token ", id, " is not < vocab_size ", vocab);
  c10::InferenceMode inference;
  Generation out;
  out.stats.prompt_tokens = std::min<int64_t>(static_cast<int64_t>(prompt.size()), window);
  std::optional<KvCache> cache;
  const int64_t fed_tokens = static_cast<int64_t>(prompt.size()) + options.max_new_tokens - 1;
  if (options.use_cache && options.max_new_tokens > 0 && static_cast<int64_t>(prompt.size()) <= window) {
    cache.emplace(model.NewCache(std::min(window, fed_tokens)));
  }
  std::vector<int64_t> ids = prompt;
  for (int64_t i = 0; i < options.max_new_tokens; ++i) {
    const auto begin = Clock::now();
    const int64_t next = NextToken(NextLogits(model, ids, cache, out.stats), options, generator);
    const double seconds = std::chrono::duration<double>(Clock::now() - begin).count();
    if (i == 0) {
      out.stats.prefill_s = seconds;
    } else {
      out.stats.decode_s += seconds;
      ++out.stats.decode_tokens;
    }
    ids.push_back(next);
    out.tokens.push_back(next);
    if (on_token) on_token(next);
    const auto& stops = options.stop_tokens;
    if (std::find(stops.begin(), stops.end(), next) != stops.end()) {
      out.stats.stopped = true;
      break;
    }
  }
  return out;
}

}  // namespace ps::models
