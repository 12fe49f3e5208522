// Llama behind CausalLm (causal_lm.h): the cached step runs the decoder blocks on the
// new tokens only, rotary positions offset by the cache's length (one cos/sin table for
// the cache's capacity, narrowed per step), q/k/v biases and Qwen3's q/k norms as in
// LlamaAttention, kv heads cached unexpanded, Mistral's window by CachedAttention.
#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include "models/causal_lm.h"
#include "models/llama_layers.h"

namespace ps::models {
namespace {

class LlamaLm final : public CausalLm {
 public:
  explicit LlamaLm(Llama model) : model_(std::move(model)), inv_freq_(RotaryInverseFrequencies(model_->config())) {
    model_->eval();
    if (device().is_cpu()) UseRowVectorLayout(Weights());
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
  std::vector<at::Tensor> Weights() const {  // the linear layers' and the LM head's
    std::vector<at::Tensor> out;
    for (const auto& m : *model_->layers) {
      const auto* block = m->as<LlamaBlockImpl>();
      const auto& a = block->self_attn;
      const auto& f = block->mlp;
      for (const auto* linear : {&a->q_proj, &a->k_proj, &a->v_proj, &a->o_proj, &f->gate_proj, &f->up_proj,
                                 &f->down_proj}) {
        out.push_back((*linear)->weight);
      }
    }
    out.push_back(model_->config().tie_word_embeddings ? model_->embed_tokens->weight : model_->lm_head->weight);
    return out;
  }

  // cos and sin of positions start..start+tokens-1 (views of tables for `capacity`).
  RotaryTables Rope(int64_t start, int64_t tokens, int64_t capacity);

  Llama model_;
  at::Tensor inv_freq_;  // [head_dim / 2] fp32, CPU, scaling applied
  RotaryTables rope_;    // [positions, head_dim] fp32 on the model's device
};

RotaryTables LlamaLm::Rope(int64_t start, int64_t tokens, int64_t capacity) {
  if (!rope_.cos.defined() || rope_.cos.size(0) < start + tokens || rope_.cos.device() != device()) {
    rope_ = MakeRotaryTables(inv_freq_, capacity, device());
  }
  return {rope_.cos.narrow(0, start, tokens), rope_.sin.narrow(0, start, tokens)};
}

// proj(x) as [1, heads, T, head_dim], normalised per head when `norm` exists (Qwen3), as
// LlamaAttentionImpl::Heads.
at::Tensor Heads(torch::nn::Linear& proj, RmsNorm& norm, const at::Tensor& x, int64_t heads, int64_t head_dim) {
  at::Tensor y = proj->forward(x).view({1, x.size(1), heads, head_dim});
  if (!norm.is_empty()) y = norm(y);
  return y.transpose(1, 2);
}

at::Tensor LlamaLm::Step(const at::Tensor& ids, KvCache& cache) {
  const LlamaConfig& c = model_->config();
  const int64_t start = cache.length(), tokens = ids.size(1), head_dim = c.head_width();
  TORCH_CHECK(ids.dim() == 2 && ids.size(0) == 1 && tokens >= 1, "Step: ids must be [1, T >= 1], got ", ids.sizes());
  TORCH_CHECK(start + tokens <= cache.capacity(), "Step: ", start, " cached tokens and ", tokens,
              " more exceed the cache's ", cache.capacity());
  const RotaryTables rope = Rope(start, tokens, cache.capacity());
  at::Tensor x = model_->embed_tokens(ids);
  RmsNorm no_norm{nullptr};
  for (int64_t layer = 0; layer < c.n_layer; ++layer) {
    auto* block = model_->layers[layer]->as<LlamaBlockImpl>();
    auto* attn = block->self_attn.get();
    const at::Tensor h = block->input_layernorm(x);
    const at::Tensor q = ApplyRotary(Heads(attn->q_proj, attn->q_norm, h, c.n_head, head_dim), rope);
    const at::Tensor k = ApplyRotary(Heads(attn->k_proj, attn->k_norm, h, c.kv_heads(), head_dim), rope);
    const auto [keys, values] = cache.Append(layer, k, Heads(attn->v_proj, no_norm, h, c.kv_heads(), head_dim));
    const at::Tensor y = CachedAttention(q, keys, values, start, c.sliding_window);
    x = x + attn->o_proj(y.transpose(1, 2).reshape({1, tokens, -1}));
    x = x + block->mlp->forward(block->post_attention_layernorm(x));
  }
  cache.Advance(tokens);
  // The head on the last position only: the final norm, then lm_head (or the tied embedding).
  const at::Tensor last = model_->norm(x.select(1, tokens - 1));  // [1, C]
  const at::Tensor& head = c.tie_word_embeddings ? model_->embed_tokens->weight : model_->lm_head->weight;
  return at::linear(last, head).squeeze(0);
}

}  // namespace

std::unique_ptr<CausalLm> MakeCausalLm(Llama model) { return std::make_unique<LlamaLm>(std::move(model)); }

}  // namespace ps::models
