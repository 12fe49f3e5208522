// KvCache: the keys and values of the tokens a decoder has already seen, per layer, so
// that generation (causal_lm.h, sampling.h) computes a prompt once and then one token
// per step. Preallocated for `capacity` tokens: a step copies its tokens' keys and
// values into the next slots and attends through narrow() views of what is cached (no
// per-step allocation or copy of the cache). Grouped-query models cache their kv heads
// only, never expanded to the query heads. One sequence (batch 1); owned by whoever runs
// the generation, used by one thread at a time.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace ps::models {

class KvCache {
 public:
  // Zero-length cache of `n_layer` layers for up to `capacity_tokens` tokens, each layer
  // `kv_heads` heads of `head_dim`, in `options`' dtype and device.
  KvCache(int64_t n_layer, int64_t kv_heads, int64_t head_dim, int64_t capacity_tokens, at::TensorOptions options);

  int64_t length() const { return length_; }  // tokens cached (positions 0..length-1)
  int64_t capacity() const { return capacity_; }
  int64_t n_layer() const { return static_cast<int64_t>(keys_.size()); }

  // Writes `layer`'s keys and values of T new tokens, k and v [1, kv_heads, T, head_dim],
  // at positions length()..length()+T-1, and returns views of the keys and values of
  // positions 0..length()+T-1, each [1, kv_heads, length()+T, head_dim]. length() does
  // not move until Advance(T); c10::Error when length() + T > capacity().
  std::pair<at::Tensor, at::Tensor> Append(int64_t layer, const at::Tensor& k, const at::Tensor& v);

  // Every layer has appended `tokens` tokens: they are now cached.
  void Advance(int64_t tokens);

  // Forgets every token (the memory stays).
  void Clear() { length_ = 0; }

  // Memory held by the cache: 2 x layers x kv_heads x capacity x head_dim elements.
  int64_t bytes() const;

 private:
  std::vector<at::Tensor> keys_, values_;  // per layer [1, kv_heads, capacity, head_dim]
  int64_t capacity_ = 0;
  int64_t length_ = 0;
};

// Causal self-attention of queries q [1, heads, T, head_dim] at positions
// start..start+T-1 over keys and values k, v [1, kv_heads, start+T, head_dim] of
// positions 0..start+T-1 (heads a multiple of kv_heads: grouped-query attention without
// expanding k and v). With window > 0 the query at position p sees only the keys j with
// p - window < j <= p (Mistral's sliding window); 0 = no window. Returns
// [1, heads, T, head_dim]. The full forward (start 0) and a cached step agree: a
// prompt with start 0 is masked exactly as LlamaAttention masks it.
at::Tensor CachedAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t start,
                           int64_t window);

}  // namespace ps::models
