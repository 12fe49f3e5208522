// Sizes derived from a GPT shape without building it: a shape too large for int64
// counts is an error naming the shape, never a wrapped (negative) size.
#include <c10/util/Exception.h>

#include "models/gpt_config.h"
#include "tests/catch.h"

namespace ps::models {
namespace {

TEST_CASE("parameter counts that overflow int64 are errors naming the shape", "[gpt][overflow]") {
  GptConfig c;
  c.n_layer = 2;
  c.n_embd = 3000000000;  // n_embd^2 alone is 9e18, and 12 of them per block
  c.n_head = 1;
  CHECK_THROWS_AS(GptParameterCount(c), c10::Error);
  CHECK_THROWS_WITH(GptParameterCount(c), Catch::Contains("model.n_layer 2, model.n_embd 3000000000, "
                                                          "model.n_positions 256, model.vocab_size 256: "
                                                          "the parameter count overflows int64"));
  CHECK_THROWS_WITH(GptParameterShapes(c), Catch::Contains("the parameter count overflows int64"));
  // Each matrix fits, but the layers together do not.
  c.n_embd = 100000;
  c.n_layer = int64_t{1} << 40;
  CHECK_THROWS_WITH(GptParameterCount(c), Catch::Contains("the parameter count overflows int64"));
}

TEST_CASE("the activation estimate overflowing int64 is an error", "[gpt][overflow]") {
  GptConfig c;
  c.n_layer = 10000;
  c.n_embd = 1000000;
  CHECK(EstimateActivationBytes(c, 1, 4) > 0);
  CHECK_THROWS_WITH(EstimateActivationBytes(c, int64_t{1} << 40, 4),
                    Catch::Contains("the activation estimate (train.micro_batch_size x data.seq_len tokens) "
                                    "overflows int64"));
}

TEST_CASE("the activation estimate of k micro-batches kept (vertical schedule)", "[gpt][vertical]") {
  GptConfig c;  // GPT-2 124M shape: 12 x 768, vocabulary 50257
  c.n_layer = 12;
  c.n_head = 12;
  c.n_embd = 768;
  c.vocab_size = 50257;
  c.activation_checkpointing = true;
  const int64_t tokens = 1024, C = 768, V = 50257;
  // One: the block inputs (12 C), embeddings and ln_f (3 C), one block recomputed (17 C),
  // per token; the logits of one slice (the default 1280 tokens >= 1024: all of them),
  // fp32 and a temporary as large (V x 8).
  CHECK(EstimateActivationBytes(c, tokens, 2) == tokens * ((12 * C + 17 * C + 3 * C) * 2 + V * 8));
  // Four kept: the kept inputs four times, the recomputed block and logits once.
  CHECK(EstimateActivationBytes(c, tokens, 2, 4) == tokens * (4 * (12 * C + 3 * C) * 2 + 17 * C * 2 + V * 8));
  c.activation_checkpointing = false;
  CHECK_THROWS_WITH(EstimateActivationBytes(c, tokens, 2, 4), Catch::Contains("needs activation checkpointing"));
}

TEST_CASE("the LM head's slice: model.loss_slice_tokens, or 256 MiB of fp32 logits", "[gpt][sliced_head]") {
  CHECK(LossSliceTokens(0, 128256) == 512);  // Llama 3: 2^26 / 128256 = 523
  CHECK(LossSliceTokens(0, 151936) == 384);  // Qwen2.5: 441
  CHECK(LossSliceTokens(0, 50257) == 1280);  // GPT-2: 1335
  CHECK(LossSliceTokens(0, 256) == 262144);
  CHECK(LossSliceTokens(0, int64_t{1} << 21) == 32);  // below 64: not rounded
  CHECK(LossSliceTokens(0, int64_t{1} << 40) == 1);
  CHECK(LossSliceTokens(300, 128256) == 300);
}

TEST_CASE("the activation estimate counts one slice of logits, not every token's", "[gpt][sliced_head]") {
  GptConfig c;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = 256;
  c.vocab_size = 128256;
  const int64_t C = 256, V = 128256, blocks_and_outside = (2 * 17 * C + 3 * C) * 2;
  // 8192 tokens: the default slice of 512 tokens' logits (fp32, and a temporary as large).
  CHECK(EstimateActivationBytes(c, 8192, 2) == 8192 * blocks_and_outside + 512 * V * 8);
  // Fewer tokens than a slice: all of them.
  CHECK(EstimateActivationBytes(c, 100, 2) == 100 * blocks_and_outside + 100 * V * 8);
  c.loss_slice_tokens = 2048;
  CHECK(EstimateActivationBytes(c, 8192, 2) == 8192 * blocks_and_outside + 2048 * V * 8);
}

TEST_CASE("sizes near the limits are still counted exactly", "[gpt][overflow]") {
  GptConfig c;  // GPT-2 124M shape
  c.n_layer = 12;
  c.n_head = 12;
  c.n_embd = 768;
  c.n_positions = 1024;
  c.vocab_size = 50257;
  CHECK(GptParameterCount(c) == 124439808);
  c.n_layer = 10000;
  c.n_embd = 1000000;
  c.n_positions = 10000000;
  c.vocab_size = 10000000;
  // 10000 x (12e12 + 13e6) + 1e13 + 1e13 + 2e6: far above any real model, still exact.
  CHECK(GptParameterCount(c) == int64_t{120000130000000000} + 20000000000000 + 2000000);
}

}  // namespace
}  // namespace ps::models
