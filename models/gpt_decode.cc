// Gpt behind CausalLm (causal_lm.h): the cached step runs GPT-2's blocks on the new
// tokens only (learned positions from the cache's length), with the keys and values of
// the earlier ones from the KvCache.
#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include "models/causal_lm.h"

namespace ps::models {
namespace {

class GptLm final : public CausalLm {
 public:
  explicit GptLm(Gpt model) : model_(std::move(model)) {
    model_->eval();
    for (const at::Tensor& w : Weights()) PackWeights({w});  // c_attn holds q, k, v already
  }

  int64_t vocab_size() const override { return model_->config().vocab_size; }
  int64_t n_positions() const override { return model_->config().n_positions; }
  at::Device device() const override { return model_->wte->weight.device(); }
  at::Tensor Forward(const at::Tensor& ids) override { return model_->forward(ids); }

  KvCache NewCache(int64_t capacity_tokens) const override {
    const GptConfig& c = model_->config();
    TORCH_CHECK(capacity_tokens >= 1 && capacity_tokens <= c.n_positions, "a KV cache of ", capacity_tokens,
                " tokens: must be in [1, n_positions ", c.n_positions, "]");
    return KvCache(c.n_layer, c.n_head, c.n_embd / c.n_head, capacity_tokens, model_->wte->weight.options());
  }

  at::Tensor Step(const at::Tensor& ids, KvCache& cache) override;

 private:
  std::vector<at::Tensor> Weights() const {  // the linear layers' and the LM head's
    std::vector<at::Tensor> out;
    for (const auto& m : *model_->h) {
      const auto* block = m->as<BlockImpl>();
      for (const auto* linear : {&block->attn->c_attn, &block->attn->c_proj, &block->mlp->c_fc, &block->mlp->c_proj}) {
        out.push_back((*linear)->weight);
      }
    }
    out.push_back(model_->config().tie_word_embeddings ? model_->wte->weight : model_->lm_head->weight);
    return out;
  }

  Gpt model_;
};

at::Tensor GptLm::Step(const at::Tensor& ids, KvCache& cache) {
  const GptConfig& c = model_->config();
  const int64_t start = cache.length(), tokens = ids.size(1), width = c.n_embd, head_dim = width / c.n_head;
  TORCH_CHECK(ids.dim() == 2 && ids.size(0) == 1 && tokens >= 1, "Step: ids must be [1, T >= 1], got ", ids.sizes());
  TORCH_CHECK(start + tokens <= cache.capacity(), "Step: ", start, " cached tokens and ", tokens,
              " more exceed the cache's ", cache.capacity());
  const at::Tensor positions = at::arange(start, start + tokens, ids.options());
  at::Tensor x = model_->wte(ids) + model_->wpe(positions);  // as GptImpl::Embed, dropout off
  auto heads = [&](const at::Tensor& t) { return t.view({1, tokens, c.n_head, head_dim}).transpose(1, 2); };
  for (int64_t layer = 0; layer < c.n_layer; ++layer) {
    auto* block = model_->h[layer]->as<BlockImpl>();
    auto* attn = block->attn.get();
    const auto qkv = attn->c_attn(block->ln_1(x)).split(width, /*dim=*/2);  // 3 x [1, T, C]
    const auto [k, v] = cache.Append(layer, heads(qkv[1]), heads(qkv[2]));
    const at::Tensor y = CachedAttention(heads(qkv[0]), k, v, start, /*window=*/0);
    x = x + attn->c_proj(y.transpose(1, 2).reshape({1, tokens, width}));
    x = x + block->mlp(block->ln_2(x));
  }
  cache.Advance(tokens);
  // The head on the last position only: ln_f, then the LM head (or the tied embedding).
  const at::Tensor last = model_->ln_f(x.select(1, tokens - 1));  // [1, C]
  const at::Tensor& head = c.tie_word_embeddings ? model_->wte->weight : model_->lm_head->weight;
  return at::linear(last, head).squeeze(0);
}

}  // namespace

std::unique_ptr<CausalLm> MakeCausalLm(Gpt model) { return std::make_unique<GptLm>(std::move(model)); }

}  // namespace ps::models
