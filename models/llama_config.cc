#include "models/llama_config.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <limits>
#include <utility>

namespace ps::models {
namespace {

// int64 arithmetic with every step checked: a shape too large to count is an error
// naming `what`, never a wrapped size.
struct Checked {
  const char* what;
  int64_t Mul(int64_t a, int64_t b) const {
    int64_t out = 0;
    TORCH_CHECK(!__builtin_mul_overflow(a, b, &out), "the Llama shape's ", what, " overflows int64");
    return out;
  }
  int64_t Add(int64_t a, int64_t b) const {
    int64_t out = 0;
    TORCH_CHECK(!__builtin_add_overflow(a, b, &out), "the Llama shape's ", what, " overflows int64");
    return out;
  }
};

// The fields every preset sets; the rest keep their defaults or are set after.
LlamaConfig Shape(int64_t layers, int64_t heads, int64_t kv_heads, int64_t hidden, int64_t head_dim,
                  int64_t intermediate, int64_t vocab, int64_t positions, double eps, double theta, bool tied) {
  LlamaConfig c;
  c.n_layer = layers;
  c.n_head = heads;
  c.n_kv_head = kv_heads;
  c.n_embd = hidden;
  c.head_dim = head_dim;
  c.intermediate_size = intermediate;
  c.vocab_size = vocab;
  c.n_positions = positions;
  c.rms_norm_eps = eps;
  c.rope_theta = theta;
  c.tie_word_embeddings = tied;
  return c;
}

LlamaConfig Llama3(LlamaConfig c, double factor) {
  c.rope_scaling = {RopeScalingType::kLlama3, factor, 1.0, 4.0, 8192};
  return c;
}

LlamaConfig QkvBias(LlamaConfig c) {
  c.qkv_bias = true;
  return c;
}

LlamaConfig QkNorm(LlamaConfig c) {
  c.qk_norm = true;
  return c;
}

LlamaConfig InitStd(LlamaConfig c, double std) {
  c.init_std = std;
  return c;
}

}  // namespace

const char* ToString(RopeScalingType type) {
  switch (type) {
    case RopeScalingType::kNone:
      return "default";
    case RopeScalingType::kLinear:
      return "linear";
    case RopeScalingType::kLlama3:
      return "llama3";
  }
  return "?";
}

const std::vector<LlamaPreset>& LlamaPresets() {
  // The config.json of each published checkpoint (HF Hub).
  static const std::vector<LlamaPreset> kPresets = {
      {"llama-3.2-1b", Llama3(Shape(16, 32, 8, 2048, 64, 8192, 128256, 131072, 1e-5, 500000, true), 32)},
      {"llama-3.2-3b", Llama3(Shape(28, 24, 8, 3072, 128, 8192, 128256, 131072, 1e-5, 500000, true), 32)},
      {"llama-3.1-8b", Llama3(Shape(32, 32, 8, 4096, 128, 14336, 128256, 131072, 1e-5, 500000, false), 8)},
      {"qwen2.5-0.5b", QkvBias(Shape(24, 14, 2, 896, 64, 4864, 151936, 32768, 1e-6, 1e6, true))},
      {"qwen2.5-1.5b", QkvBias(Shape(28, 12, 2, 1536, 128, 8960, 151936, 131072, 1e-6, 1e6, true))},
      {"qwen2.5-7b", QkvBias(Shape(28, 28, 4, 3584, 128, 18944, 152064, 131072, 1e-6, 1e6, false))},
      {"qwen3-0.6b", QkNorm(Shape(28, 16, 8, 1024, 128, 3072, 151936, 40960, 1e-6, 1e6, true))},
      {"qwen3-1.7b", QkNorm(Shape(28, 16, 8, 2048, 128, 6144, 151936, 40960, 1e-6, 1e6, true))},
      {"qwen3-4b", QkNorm(Shape(36, 32, 8, 2560, 128, 9728, 151936, 40960, 1e-6, 1e6, true))},
      {"qwen3-8b", QkNorm(Shape(36, 32, 8, 4096, 128, 12288, 151936, 40960, 1e-6, 1e6, false))},
      {"mistral-7b-v0.3", Shape(32, 32, 8, 4096, 128, 14336, 32768, 32768, 1e-5, 1e6, false)},
      {"smollm2-135m", InitStd(Shape(30, 9, 3, 576, 64, 1536, 49152, 8192, 1e-5, 100000, true), 1.0 / 24)},
      {"smollm2-360m", Shape(32, 15, 5, 960, 64, 2560, 49152, 8192, 1e-5, 100000, true)},
      {"smollm2-1.7b", Shape(24, 32, 32, 2048, 64, 8192, 49152, 8192, 1e-5, 130000, true)},
      {"tinyllama-1.1b", Shape(22, 32, 4, 2048, 64, 5632, 32000, 2048, 1e-5, 10000, false)},
  };
  return kPresets;
}

std::optional<LlamaPreset> FindLlamaPreset(const std::string& name) {
  for (const auto& p : LlamaPresets()) {
    if (p.name == name) return p;
  }
  return std::nullopt;
}

std::vector<ParameterShape> LlamaParameterShapes(const LlamaConfig& c) {
  LlamaParameterCount(c);  // checks the total, so every count below fits int64
  TORCH_CHECK(c.n_layer < std::numeric_limits<int>::max(), "model.n_layer ", c.n_layer, ": too many blocks");
  const int64_t C = c.n_embd, hd = c.head_width(), q = c.n_head * hd, kv = c.kv_heads() * hd, m = c.mlp_width();
  const int last = static_cast<int>(c.n_layer) + 1;
  std::vector<ParameterShape> out;
  out.push_back({"embed_tokens.weight", c.vocab_size * C, c.tie_word_embeddings ? std::vector<int>{0, last} : std::vector<int>{0}});
  for (int b = 1; b <= c.n_layer; ++b) {
    const std::string p = "layers." + std::to_string(b - 1) + ".";
    std::vector<std::pair<std::string, int64_t>> block = {{"input_layernorm.weight", C}, {"self_attn.q_proj.weight", q * C}};
    if (c.qkv_bias) block.push_back({"self_attn.q_proj.bias", q});
    block.push_back({"self_attn.k_proj.weight", kv * C});
    if (c.qkv_bias) block.push_back({"self_attn.k_proj.bias", kv});
    block.push_back({"self_attn.v_proj.weight", kv * C});
    if (c.qkv_bias) block.push_back({"self_attn.v_proj.bias", kv});
    block.push_back({"self_attn.o_proj.weight", C * q});
    if (c.o_bias) block.push_back({"self_attn.o_proj.bias", C});
    if (c.qk_norm) {
      block.push_back({"self_attn.q_norm.weight", hd});
      block.push_back({"self_attn.k_norm.weight", hd});
    }
    block.push_back({"post_attention_layernorm.weight", C});
    block.push_back({"mlp.gate_proj.weight", m * C});
    block.push_back({"mlp.up_proj.weight", m * C});
    block.push_back({"mlp.down_proj.weight", C * m});
    for (const auto& [name, numel] : block) out.push_back({p + name, numel, {b}});
  }
  out.push_back({"norm.weight", C, {last}});
  if (!c.tie_word_embeddings) out.push_back({"lm_head.weight", c.vocab_size * C, {last}});
  return out;
}

int64_t LlamaParameterCount(const LlamaConfig& c) {
  const Checked a{"parameter count"};
  const int64_t C = c.n_embd, hd = c.head_width();
  const int64_t q = a.Mul(c.n_head, hd), kv = a.Mul(c.kv_heads(), hd);
  int64_t block = a.Add(a.Mul(2, a.Mul(q, C)), a.Mul(2, a.Mul(kv, C)));  // q, o; k, v
  block = a.Add(block, a.Mul(3, a.Mul(c.mlp_width(), C)));               // gate, up, down
  block = a.Add(block, 2 * C);                                           // the two norms
  if (c.qkv_bias) block = a.Add(block, a.Add(q, 2 * kv));
  if (c.o_bias) block = a.Add(block, C);
  if (c.qk_norm) block = a.Add(block, 2 * hd);
  const int64_t table = a.Mul(c.vocab_size, C);
  const int64_t head = c.tie_word_embeddings ? 0 : table;
  return a.Add(a.Add(a.Add(table, a.Mul(c.n_layer, block)), C), head);
}

int64_t EstimateLlamaActivationBytes(const LlamaConfig& c, int64_t tokens, int64_t element_bytes,
                                     int64_t micro_batches_kept) {
  const Checked a{"activation estimate (train.micro_batch_size x data.seq_len tokens)"};
  const int64_t C = c.n_embd, hd = c.head_width();
  const int64_t attention = a.Mul(a.Add(a.Mul(2, c.n_head), a.Mul(2, c.kv_heads())), hd);
  const int64_t saved_per_block = a.Add(a.Add(a.Mul(6, C), attention), a.Mul(4, c.mlp_width()));
  const int64_t outside = a.Mul(3, C);  // embedding output, final norm input and output
  // One slice of the LM head's logits at a time (sliced_head.h).
  const int64_t slice = std::min(tokens, LossSliceTokens(c.loss_slice_tokens, c.vocab_size));
  const int64_t logits = a.Mul(a.Mul(c.vocab_size, kSlicedLogitBytes), slice);
  if (micro_batches_kept > 1) {
    TORCH_CHECK(c.activation_checkpointing, "keeping ", micro_batches_kept,
                " micro-batches' activations needs activation checkpointing");
    const int64_t kept = a.Mul(a.Mul(a.Add(a.Mul(c.n_layer, C), outside), element_bytes), micro_batches_kept);
    return a.Add(a.Mul(a.Add(kept, a.Mul(saved_per_block, element_bytes)), tokens), logits);
  }
  const int64_t blocks = c.activation_checkpointing ? a.Add(a.Mul(c.n_layer, C), saved_per_block)
                                                    : a.Mul(c.n_layer, saved_per_block);
  return a.Add(a.Mul(a.Mul(a.Add(blocks, outside), element_bytes), tokens), logits);
}

void ValidateLlamaConfig(const LlamaConfig& c) {
  TORCH_CHECK(c.n_layer > 0, "model.n_layer must be > 0, got ", c.n_layer);
  TORCH_CHECK(c.n_head > 0, "model.n_head must be > 0, got ", c.n_head);
  TORCH_CHECK(c.n_embd > 0, "model.n_embd must be > 0, got ", c.n_embd);
  TORCH_CHECK(c.head_dim > 0 || c.n_embd % c.n_head == 0, "model.n_embd (", c.n_embd,
              ") must be divisible by model.n_head (", c.n_head, ") unless model.head_dim is set");
  TORCH_CHECK(c.head_dim >= 0 && c.head_width() % 2 == 0, "model.head_dim must be even (rotary pairs), got ",
              c.head_width());
  TORCH_CHECK(c.n_kv_head >= 0 && c.n_head % c.kv_heads() == 0, "model.num_key_value_heads (", c.kv_heads(),
              ") must divide model.n_head (", c.n_head, ")");
  TORCH_CHECK(c.intermediate_size >= 0, "model.intermediate_size must be >= 0, got ", c.intermediate_size);
  TORCH_CHECK(c.n_positions > 0, "model.n_positions must be > 0, got ", c.n_positions);
  TORCH_CHECK(c.vocab_size > 0, "model.vocab_size must be > 0, got ", c.vocab_size);
  TORCH_CHECK(c.rms_norm_eps > 0, "model.rms_norm_eps must be > 0, got ", c.rms_norm_eps);
  TORCH_CHECK(c.rope_theta > 0, "model.rope_theta must be > 0, got ", c.rope_theta);
  TORCH_CHECK(c.sliding_window >= 0, "model.sliding_window must be >= 0 (0: none), got ", c.sliding_window);
  TORCH_CHECK(c.attention_dropout >= 0.0 && c.attention_dropout < 1.0,
              "model.attention_dropout must be in [0, 1), got ", c.attention_dropout);
  const RopeScaling& r = c.rope_scaling;
  if (r.type != RopeScalingType::kNone) {
    TORCH_CHECK(r.factor >= 1.0, "model.rope_scaling.factor must be >= 1, got ", r.factor);
  }
  if (r.type == RopeScalingType::kLlama3) {
    TORCH_CHECK(r.high_freq_factor > r.low_freq_factor && r.low_freq_factor > 0,
                "model.rope_scaling: high_freq_factor (", r.high_freq_factor, ") must exceed low_freq_factor (",
                r.low_freq_factor, ") > 0");
    TORCH_CHECK(r.original_max_position_embeddings > 0,
                "model.rope_scaling.original_max_position_embeddings must be > 0");
  }
}

}  // namespace ps::models
