#include "models/gpt_config.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <limits>

namespace ps::models {
namespace {

// Sizes derived from a shape, in int64 with every step checked: a shape too large to
// count is a c10::Error naming the shape and what overflowed, never a wrapped
// (negative) size.
class ShapeArithmetic {
 public:
  ShapeArithmetic(const GptConfig& config, const char* what) : config_(config), what_(what) {}
  int64_t Mul(int64_t a, int64_t b) const {
    int64_t out = 0;
    TORCH_CHECK(!__builtin_mul_overflow(a, b, &out), Overflow());
    return out;
  }
  int64_t Add(int64_t a, int64_t b) const {
    int64_t out = 0;
    TORCH_CHECK(!__builtin_add_overflow(a, b, &out), Overflow());
    return out;
  }

 private:
  std::string Overflow() const {
    return "model.n_layer " + std::to_string(config_.n_layer) + ", model.n_embd " + std::to_string(config_.n_embd) +
           ", model.n_positions " + std::to_string(config_.n_positions) + ", model.vocab_size " +
           std::to_string(config_.vocab_size) + ": " + what_ + " overflows int64";
  }
  const GptConfig& config_;
  const char* what_;
};

}  // namespace

const std::vector<GptPreset>& GptPresets() {
  // GPT-2 (Radford et al. 2019, HF configs) and PatrickStar's model zoo
  // (patrickstar-internals.md §7.1). vocab 50257 = GPT-2 BPE.
  static const std::vector<GptPreset> kPresets = {
      {"gpt2-124m", 12, 12, 768, 1024, 50257},
      {"gpt2-350m", 24, 16, 1024, 1024, 50257},
      {"gpt2-774m", 36, 20, 1280, 1024, 50257},
      {"gpt2-1.5b", 48, 25, 1600, 1024, 50257},
      {"GPT2small", 24, 16, 1536, 1024, 50257},
      {"GPT2_1B", 20, 16, 2048, 1024, 50257},
      {"megatron_1.3B", 24, 32, 2048, 1024, 50257},
      {"GPT2_2B", 40, 16, 2048, 1024, 50257},
      {"megatron_3.9B", 24, 40, 2560, 1024, 50257},
      {"GPT2_4B", 64, 16, 2304, 1024, 50257},
      {"GPT3_6B", 53, 16, 3072, 1024, 50257},
      {"GPT3_8B", 72, 16, 3072, 1024, 50257},
      {"GPT3_10B", 50, 16, 4096, 1024, 50257},
      {"GPT3_11B", 55, 16, 4096, 1024, 50257},
      {"GPT3_12B", 60, 16, 4096, 1024, 50257},
      {"GPT3_13B", 65, 16, 4096, 1024, 50257},
      {"GPT3_15B", 78, 16, 4096, 1024, 50257},
      {"GPT3_18B", 90, 16, 4096, 1024, 50257},
      {"GPT_NV_18B", 40, 16, 6144, 1024, 50257},
      {"GPT_NV_39B", 48, 16, 8192, 1024, 50257},
      {"GPT_NV_76B", 60, 16, 10240, 1024, 50257},
      {"GPT_DS_20B", 25, 16, 8192, 1024, 50257},
      {"GPT_DS_40B", 50, 16, 8192, 1024, 50257},
      {"GPT_DS_50B", 62, 16, 8192, 1024, 50257},
      {"GPT_DS_60B", 75, 16, 8192, 1024, 50257},
      {"GPT_DS_68B", 66, 16, 9216, 1024, 50257},
      {"GPT_175B", 96, 96, 12288, 1024, 50257},
  };
  return kPresets;
}

std::optional<GptPreset> FindGptPreset(const std::string& name) {
  for (const auto& p : GptPresets()) {
    if (p.name == name) return p;
  }
  return std::nullopt;
}

std::vector<ParameterShape> GptParameterShapes(const GptConfig& c) {
  // The total is checked first, so every element count below fits int64 as well.
  GptParameterCount(c);
  TORCH_CHECK(c.n_layer < std::numeric_limits<int>::max(), "model.n_layer ", c.n_layer,
              ": too many blocks to number them");
  const int64_t C = c.n_embd;
  const int last = static_cast<int>(c.n_layer) + 1;
  std::vector<ParameterShape> out;
  out.push_back({"wte.weight", c.vocab_size * C, c.tie_word_embeddings ? std::vector<int>{0, last} : std::vector<int>{0}});
  out.push_back({"wpe.weight", c.n_positions * C, {0}});
  for (int b = 1; b <= c.n_layer; ++b) {
    const std::string h = "h." + std::to_string(b - 1) + ".";
    const std::pair<const char*, int64_t> block[] = {
        {"ln_1.weight", C},          {"ln_1.bias", C},           {"attn.c_attn.weight", 3 * C * C},
        {"attn.c_attn.bias", 3 * C}, {"attn.c_proj.weight", C * C}, {"attn.c_proj.bias", C},
        {"ln_2.weight", C},          {"ln_2.bias", C},           {"mlp.c_fc.weight", 4 * C * C},
        {"mlp.c_fc.bias", 4 * C},    {"mlp.c_proj.weight", 4 * C * C}, {"mlp.c_proj.bias", C}};
    for (const auto& [name, numel] : block) out.push_back({h + name, numel, {b}});
  }
  out.push_back({"ln_f.weight", C, {last}});
  out.push_back({"ln_f.bias", C, {last}});
  if (!c.tie_word_embeddings) out.push_back({"lm_head.weight", c.vocab_size * C, {last}});
  return out;
}

int64_t EstimateActivationBytes(const GptConfig& c, int64_t tokens, int64_t element_bytes,
                                int64_t micro_batches_kept) {
  const ShapeArithmetic a(c, "the activation estimate (train.micro_batch_size x data.seq_len tokens)");
  const int64_t C = c.n_embd;
  constexpr int64_t kBlockSaved = 17;  // elements per token and n_embd kept by one block
  const int64_t saved_per_block = a.Mul(kBlockSaved, C);
  const int64_t outside = a.Mul(3, C);  // embedding sum, ln_f input and output
  // One slice of the LM head's logits at a time (sliced_head.h).
  const int64_t slice = std::min(tokens, LossSliceTokens(c.loss_slice_tokens, c.vocab_size));
  const int64_t logits = a.Mul(a.Mul(c.vocab_size, kSlicedLogitBytes), slice);
  if (micro_batches_kept > 1) {  // block-major: every micro-batch's block inputs, one block and head at a time
    TORCH_CHECK(c.activation_checkpointing, "keeping ", micro_batches_kept,
                " micro-batches' activations needs activation checkpointing");
    const int64_t kept = a.Mul(a.Mul(a.Add(a.Mul(c.n_layer, C), outside), element_bytes), micro_batches_kept);
    return a.Add(a.Mul(a.Add(kept, a.Mul(saved_per_block, element_bytes)), tokens), logits);
  }
  const int64_t blocks = c.activation_checkpointing ? a.Add(a.Mul(c.n_layer, C), saved_per_block)
                                                    : a.Mul(c.n_layer, saved_per_block);
  return a.Add(a.Mul(a.Mul(a.Add(blocks, outside), element_bytes), tokens), logits);
}

int64_t LossSliceTokens(int64_t setting, int64_t vocab_size) {
  if (setting > 0) return setting;
  constexpr int64_t kSliceLogitsBytes = int64_t{256} << 20;
  const int64_t tokens = kSliceLogitsBytes / (4 * std::max<int64_t>(vocab_size, 1));
  return tokens >= 64 ? tokens - tokens % 64 : std::max<int64_t>(tokens, 1);
}

int64_t GptParameterCount(const GptConfig& c) {
  const ShapeArithmetic a(c, "the parameter count");
  const int64_t C = c.n_embd;
  const int64_t CC = a.Mul(C, C);
  // Per block: ln_1 and ln_2 (2 x 2C), attn.c_attn (3CC + 3C), attn.c_proj (CC + C),
  // mlp.c_fc (4CC + 4C), mlp.c_proj (4CC + C). 13C cannot overflow once CC did not.
  const int64_t per_block = a.Add(a.Mul(12, CC), 13 * C);
  const int64_t table = a.Mul(c.vocab_size, C);
  const int64_t embeddings = a.Add(table, a.Mul(c.n_positions, C));
  const int64_t head = c.tie_word_embeddings ? 0 : table;
  return a.Add(a.Add(a.Add(embeddings, a.Mul(c.n_layer, per_block)), 2 * C), head);
}

void ValidateGptConfig(const GptConfig& c) {
  TORCH_CHECK(c.n_layer > 0, "model.n_layer must be > 0, got ", c.n_layer);
  TORCH_CHECK(c.n_head > 0, "model.n_head must be > 0, got ", c.n_head);
  TORCH_CHECK(c.n_embd > 0, "model.n_embd must be > 0, got ", c.n_embd);
  TORCH_CHECK(c.n_embd % c.n_head == 0, "model.n_embd (", c.n_embd,
              ") must be divisible by model.n_head (", c.n_head, ")");
  TORCH_CHECK(c.n_positions > 0, "model.n_positions must be > 0, got ", c.n_positions);
  TORCH_CHECK(c.vocab_size > 0, "model.vocab_size must be > 0, got ", c.vocab_size);
  TORCH_CHECK(c.dropout >= 0.0 && c.dropout < 1.0, "model.dropout must be in [0, 1), got ",
              c.dropout);
}

}  // namespace ps::models
