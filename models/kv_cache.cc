#include "models/kv_cache.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>

namespace ps::models {

KvCache::KvCache(int64_t n_layer, int64_t kv_heads, int64_t head_dim, int64_t capacity_tokens,
                 at::TensorOptions options)
    : capacity_(capacity_tokens) {
  TORCH_CHECK(n_layer > 0 && kv_heads > 0 && head_dim > 0 && capacity_tokens > 0, "KvCache: ", n_layer,
              " layers, ", kv_heads, " kv heads of ", head_dim, ", ", capacity_tokens, " tokens: all must be > 0");
  for (int64_t i = 0; i < n_layer; ++i) {
    keys_.push_back(at::empty({1, kv_heads, capacity_tokens, head_dim}, options));
    values_.push_back(at::empty({1, kv_heads, capacity_tokens, head_dim}, options));
  }
}

std::pair<at::Tensor, at::Tensor> KvCache::Append(int64_t layer, const at::Tensor& k, const at::Tensor& v) {
  TORCH_INTERNAL_ASSERT(layer >= 0 && layer < n_layer(), "KvCache: no layer ", layer);
  const int64_t tokens = k.size(2);
  TORCH_CHECK(length_ + tokens <= capacity_, "KvCache: ", length_, " tokens cached and ", tokens,
              " more exceed its capacity of ", capacity_);
  keys_[layer].narrow(2, length_, tokens).copy_(k);
  values_[layer].narrow(2, length_, tokens).copy_(v);
  return {keys_[layer].narrow(2, 0, length_ + tokens), values_[layer].narrow(2, 0, length_ + tokens)};
}

void KvCache::Advance(int64_t tokens) {
  TORCH_INTERNAL_ASSERT(tokens >= 0 && length_ + tokens <= capacity_, "KvCache: advancing ", tokens, " from ",
                        length_, " past capacity ", capacity_);
  length_ += tokens;
}

int64_t KvCache::bytes() const {
  int64_t total = 0;
  for (size_t i = 0; i < keys_.size(); ++i) total += keys_[i].nbytes() + values_[i].nbytes();
  return total;
}

at::Tensor CachedAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t start,
                           int64_t window) {
  const int64_t heads = q.size(1), tokens = q.size(2), head_dim = q.size(3);
  const int64_t kv_heads = k.size(1), keys = k.size(2);
  TORCH_INTERNAL_ASSERT(keys == start + tokens && heads % kv_heads == 0, "CachedAttention: ", tokens,
                        " queries from position ", start, " over ", keys, " keys; ", heads, " heads, ", kv_heads,
                        " kv heads");
  const bool gqa = heads != kv_heads;
  if (tokens == 1) {
    // One query at position `start` sees the keys of the window ending at it: no mask.
    // The `group` query heads sharing a kv head become `group` queries of that head, so
    // k and v are read once per kv head and never expanded.
    const int64_t first = window > 0 ? std::max<int64_t>(0, keys - window) : 0;
    const at::Tensor queries = q.reshape({1, kv_heads, heads / kv_heads, head_dim});
    const at::Tensor y = at::scaled_dot_product_attention(queries, k.narrow(2, first, keys - first),
                                                          v.narrow(2, first, keys - first));
    return y.reshape({1, heads, 1, head_dim});
  }
  if (start == 0 && (window == 0 || tokens <= window)) {
    return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, 0.0, /*is_causal=*/true,
                                            /*scale=*/std::nullopt, gqa);
  }
  // Query i (position start + i) sees keys j with start + i - window < j <= start + i.
  const auto long_options = q.options().dtype(at::kLong);
  const at::Tensor i = at::arange(start, start + tokens, long_options).unsqueeze(1);
  const at::Tensor j = at::arange(keys, long_options).unsqueeze(0);
  at::Tensor mask = j <= i;
  if (window > 0) mask = mask.logical_and(j > i - window);
  return at::scaled_dot_product_attention(q, k, v, mask, 0.0, /*is_causal=*/false, /*scale=*/std::nullopt, gqa);
}

}  // namespace ps::models
