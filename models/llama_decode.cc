// Llama behind CausalLm (causal_lm.h): the cached step runs the decoder blocks on the
// new tokens only, rotary positions offset by the cache's length (one cos/sin table for
// the cache's capacity, narrowed per step), q/k/v biases and Qwen3's q/k norms as in
// LlamaAttention, kv heads cached unexpanded, Mistral's window by CachedAttention. Each
// block's q/k/v projections are packed into one weight, and gate/up into another
// (PackWeights): two matrix products where there were five.
#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include "models/causal_lm.h"
#include "models/llama_layers.h"

namespace ps::models {
namespace {

// A block's packed weights: views of the storage its parameters now share.
struct PackedBlock {
  at::Tensor qkv_weight;      // [(n_head + 2 x kv_heads) x head_dim, C]
  at::Tensor qkv_bias;        // [(n_head + 2 x kv_heads) x head_dim], or undefined
  at::Tensor gate_up_weight;  // [2 x intermediate, C]
};

class LlamaLm final : public CausalLm {
 public:
  explicit LlamaLm(Llama model) : model_(std::move(model)), inv_freq_(RotaryInverseFrequencies(model_->config())) {
    model_->eval();
    for (const auto& m : *model_->layers) {
      auto* block = m->as<LlamaBlockImpl>();
      auto& a = block->self_attn;
      auto& f = block->mlp;
      blocks_.push_back({PackWeights({a->q_proj->weight, a->k_proj->weight, a->v_proj->weight}),
                         PackBiases({a->q_proj->bias, a->k_proj->bias, a->v_proj->bias}),
                         PackWeights({f->gate_proj->weight, f->up_proj->weight})});
      PackWeights({a->o_proj->weight});
      PackWeights({f->down_proj->weight});
    }
    PackWeights({model_->config().tie_word_embeddings ? model_->embed_tokens->weight : model_->lm_head->weight});
  }

  int64_t vocab_size() const override { return model_->config().vocab_size; }
  int64_t n_positions() const override { return model_->config().n_positions; }
  at::Device device() const override { return model_->embed_tokens->weight.device(); }
  at::Tensor Forward(const at::Tensor& ids) override { return model_->forward(ids); }

  KvCache NewCache(int64_t capacity_tokens) const override {
    const LlamaConfig& c = model_->config();
    TORCH_CHECK(capacity_tokens >= 1 && capacity_tokens <= c.n_positions, "a KV cache of ", capacity_tokens,
                " tokens: must be in [1, n_positions ", c.n_positions, "]");
    return KvCache(c.n_layer, c.kv_heads(), c.head_width(), capacity_tokens, model_->embed_tokens->weight.options());
  }

  at::Tensor Step(const at::Tensor& ids, KvCache& cache) override;

 private:
  // cos and sin of positions start..start+tokens-1 (views of tables for `capacity`).
  RotaryTables Rope(int64_t start, int64_t tokens, int64_t capacity);
  // Block `layer` on x [1, T, C] at positions start..start+T-1.
  at::Tensor Block(int64_t layer, const at::Tensor& x, const RotaryTables& rope, KvCache& cache);

  Llama model_;
  at::Tensor inv_freq_;  // [head_dim / 2] fp32, CPU, scaling applied
  RotaryTables rope_;    // [positions, head_dim] fp32 on the model's device
  std::vector<PackedBlock> blocks_;
};

RotaryTables LlamaLm::Rope(int64_t start, int64_t tokens, int64_t capacity) {
  if (!rope_.cos.defined() || rope_.cos.size(0) < start + tokens || rope_.cos.device() != device()) {
    rope_ = MakeRotaryTables(inv_freq_, capacity, device());
  }
  return {rope_.cos.narrow(0, start, tokens), rope_.sin.narrow(0, start, tokens)};
}

// y [1, T, heads x head_dim] as [1, heads, T, head_dim], normalised per head when `norm`
// exists (Qwen3), as LlamaAttentionImpl::Heads.
at::Tensor Heads(const at::Tensor& y, RmsNorm& norm, int64_t heads, int64_t head_dim) {
  at::Tensor h = y.view({1, y.size(1), heads, head_dim});
  if (!norm.is_empty()) h = norm(h);
  return h.transpose(1, 2);
}

at::Tensor LlamaLm::Block(int64_t layer, const at::Tensor& x, const RotaryTables& rope, KvCache& cache) {
  const LlamaConfig& c = model_->config();
  const int64_t head_dim = c.head_width(), q_width = c.n_head * head_dim, kv_width = c.kv_heads() * head_dim;
  auto* block = model_->layers[layer]->as<LlamaBlockImpl>();
  auto* attn = block->self_attn.get();
  const PackedBlock& packed = blocks_[layer];
  const at::Tensor qkv = at::linear(block->input_layernorm(x), packed.qkv_weight, packed.qkv_bias);
  RmsNorm no_norm{nullptr};
  const at::Tensor q = ApplyRotary(Heads(qkv.narrow(2, 0, q_width), attn->q_norm, c.n_head, head_dim), rope);
  const at::Tensor k = ApplyRotary(Heads(qkv.narrow(2, q_width, kv_width), attn->k_norm, c.kv_heads(), head_dim), rope);
  const at::Tensor v = Heads(qkv.narrow(2, q_width + kv_width, kv_width), no_norm, c.kv_heads(), head_dim);
  const int64_t start = cache.length(), tokens = x.size(1);
  const auto [keys, values] = cache.Append(layer, k, v);
  const at::Tensor y = CachedAttention(q, keys, values, start, c.sliding_window);
  const at::Tensor h = x + attn->o_proj(y.transpose(1, 2).reshape({1, tokens, q_width}));
  const int64_t width = c.mlp_width();
  const at::Tensor gate_up = at::linear(block->post_attention_layernorm(h), packed.gate_up_weight);
  return h + block->mlp->down_proj(at::silu(gate_up.narrow(2, 0, width)) * gate_up.narrow(2, width, width));
}

at::Tensor LlamaLm::Step(const at::Tensor& ids, KvCache& cache) {
  const LlamaConfig& c = model_->config();
  const int64_t start = cache.length(), tokens = ids.size(1);
  TORCH_CHECK(ids.dim() == 2 && ids.size(0) == 1 && tokens >= 1, "Step: ids must be [1, T >= 1], got ", ids.sizes());
  TORCH_CHECK(start + tokens <= cache.capacity(), "Step: ", start, " cached tokens and ", tokens,
              " more exceed the cache's ", cache.capacity());
  const RotaryTables rope = Rope(start, tokens, cache.capacity());
  at::Tensor x = model_->embed_tokens(ids);
  for (int64_t layer = 0; layer < c.n_layer; ++layer) x = Block(layer, x, rope, cache);
  cache.Advance(tokens);
  // The head on the last position only: the final norm, then lm_head (or the tied embedding).
  const at::Tensor last = model_->norm(x.select(1, tokens - 1));  // [1, C]
  const at::Tensor& head = c.tie_word_embeddings ? model_->embed_tokens->weight : model_->lm_head->weight;
  return at::linear(last, head).squeeze(0);
}

}  // namespace

std::unique_ptr<CausalLm> MakeCausalLm(Llama model) { return std::make_unique<LlamaLm>(std::move(model)); }

}  // namespace ps::models
