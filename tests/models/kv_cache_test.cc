// Generation with a KV cache (models/causal_lm.h, kv_cache.h) against the full forward,
// in fp32: at every step the cached logits equal the forward's last-position logits
// over the whole text (1e-5 relative), and cached greedy generation picks exactly the
// tokens of the uncached path (sampling.h, use_cache false), for GPT-2 and the Llama
// variants: GQA and MQA, Qwen2's q/k/v biases, Qwen3's q/k norms, Mistral's sliding
// window with prompt and generation longer than the window, llama3 and linear rope
// scaling, tied and untied heads; the transformers-made fixture folders too. Past
// n_positions the cached path reruns the window, as the uncached one does.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "models/causal_lm.h"
#include "models/hf_llama.h"
#include "models/safetensors.h"
#include "models/sampling.h"
// Last: c10 headers define a glog-style CHECK that Catch must override.
#include "tests/catch.h"

namespace ps::models {
namespace {

const std::string kFixtures = "tests/models/testdata/llama_family/";

// max |a - b| / max |b|.
double RelativeError(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<double>() / b.abs().max().item<double>();
}

std::vector<int64_t> RandomIds(int64_t n, int64_t vocab, uint64_t seed) {
  at::Generator g = at::make_generator<at::CPUGeneratorImpl>(seed);
  const at::Tensor t = at::randint(vocab, {n}, g, at::kLong);
  return std::vector<int64_t>(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + n);
}

at::Tensor Row(const std::vector<int64_t>& ids) { return at::tensor(ids, at::kLong).unsqueeze(0); }

// Prefill `prompt` (in steps of `prefill_chunk` tokens: a multi-token step after cached
// ones uses the explicit mask), then feed `more` one token at a time; after each step
// the cached logits equal the forward's last position over everything so far.
void CheckStepsAgainstForward(CausalLm& lm, const std::vector<int64_t>& prompt, const std::vector<int64_t>& more,
                              int64_t prefill_chunk) {
  at::NoGradGuard no_grad;
  KvCache cache = lm.NewCache(static_cast<int64_t>(prompt.size() + more.size()));
  std::vector<int64_t> seen;
  auto check = [&](const std::vector<int64_t>& step) {
    seen.insert(seen.end(), step.begin(), step.end());
    const at::Tensor cached = lm.Step(Row(step), cache);
    const at::Tensor full = lm.Forward(Row(seen)).select(1, static_cast<int64_t>(seen.size()) - 1).squeeze(0);
    INFO("after " << seen.size() << " tokens");
    CHECK(cache.length() == static_cast<int64_t>(seen.size()));
    CHECK(RelativeError(cached, full) < 1e-5);
  };
  for (size_t i = 0; i < prompt.size(); i += prefill_chunk) {
    check(std::vector<int64_t>(prompt.begin() + i, prompt.begin() + std::min(prompt.size(), i + prefill_chunk)));
  }
  for (int64_t id : more) check({id});
}

// Greedy tokens with and without the cache are the same.
void CheckGreedyAgrees(CausalLm& lm, const std::vector<int64_t>& prompt, int64_t new_tokens) {
  at::Generator g = at::make_generator<at::CPUGeneratorImpl>(1);
  SamplingOptions greedy;
  greedy.temperature = 0.0;
  greedy.max_new_tokens = new_tokens;
  const Generation cached = Generate(lm, prompt, greedy, g);
  greedy.use_cache = false;
  const Generation full = Generate(lm, prompt, greedy, g);
  CHECK(cached.tokens == full.tokens);
  CHECK(cached.tokens.size() == static_cast<size_t>(new_tokens));
  CHECK(full.stats.window_steps == new_tokens);
  // Step i sees prompt + i tokens: past n_positions from i = n_positions - prompt + 1.
  const int64_t first_past = std::max<int64_t>(0, lm.n_positions() - static_cast<int64_t>(prompt.size()) + 1);
  CHECK(cached.stats.window_steps == std::max<int64_t>(0, new_tokens - first_past));
  CHECK(cached.stats.prompt_tokens == std::min<int64_t>(static_cast<int64_t>(prompt.size()), lm.n_positions()));
  CHECK(cached.stats.decode_tokens == new_tokens - 1);
}

// Tiny models run on one thread: on a loaded 2-core machine OpenMP's waits between
// threads cost more than the work (a minute instead of seconds).
void OneThread() { at::set_num_threads(1); }

LlamaConfig TinyLlama() {
  LlamaConfig c;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_kv_head = 2;
  c.n_embd = 32;
  c.head_dim = 16;
  c.intermediate_size = 40;
  c.n_positions = 48;
  c.vocab_size = 61;
  c.init_std = 0.2;  // logits far from uniform: greedy choices are not near-ties
  return c;
}

}  // namespace

TEST_CASE("GPT-2: cached steps equal the forward; greedy tokens equal the uncached path's", "[kv_cache][gpt]") {
  OneThread();
  GptConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 16;
  c.n_positions = 24;
  c.vocab_size = 37;
  c.dropout = 0.1;  // off in generation
  c.init_std = 0.2;
  for (const bool tied : {true, false}) {
    INFO("tied " << tied);
    c.tie_word_embeddings = tied;
    torch::manual_seed(5);
    Gpt model(c);
    const at::Tensor probe = Row(RandomIds(9, c.vocab_size, 8));
    at::Tensor before;
    {
      at::NoGradGuard no_grad;
      model->eval();
      before = model->forward(probe);
    }
    auto lm = MakeCausalLm(model);
    {  // Laid out for one-token steps (UseRowVectorLayout), the model computes what it did.
      at::NoGradGuard no_grad;
      CHECK(RelativeError(lm->Forward(probe), before) < 1e-6);
    }
    CheckStepsAgainstForward(*lm, RandomIds(7, c.vocab_size, 1), RandomIds(10, c.vocab_size, 2), 7);
    CheckStepsAgainstForward(*lm, RandomIds(9, c.vocab_size, 3), RandomIds(4, c.vocab_size, 4), 4);
    CheckGreedyAgrees(*lm, RandomIds(5, c.vocab_size, 5), 12);
    CheckGreedyAgrees(*lm, RandomIds(5, c.vocab_size, 6), 40);  // past n_positions: reruns the window
    CheckGreedyAgrees(*lm, RandomIds(30, c.vocab_size, 7), 3);  // a prompt longer than n_positions
  }
}

TEST_CASE("Llama variants: cached steps equal the forward; greedy tokens equal the uncached path's",
          "[kv_cache][llama]") {
  OneThread();
  struct Variant {
    const char* name;
    std::function<void(LlamaConfig&)> set;
  };
  const std::vector<Variant> variants = {
      {"GQA, untied", [](LlamaConfig&) {}},
      {"MHA, tied",
       [](LlamaConfig& c) {
         c.n_kv_head = 0;
         c.tie_word_embeddings = true;
       }},
      {"MQA with Qwen2 q/k/v biases",
       [](LlamaConfig& c) {
         c.n_kv_head = 1;
         c.qkv_bias = true;
       }},
      {"Qwen3 q/k norms, attention_bias",
       [](LlamaConfig& c) {
         c.qk_norm = true;
         c.qkv_bias = c.o_bias = true;
       }},
      {"Mistral window 5", [](LlamaConfig& c) { c.sliding_window = 5; }},
      {"llama3 rope scaling", [](LlamaConfig& c) { c.rope_scaling = {RopeScalingType::kLlama3, 8.0, 1.0, 4.0, 8}; }},
      {"linear rope scaling, theta 5e5",
       [](LlamaConfig& c) {
         c.rope_theta = 5e5;
         c.rope_scaling = {RopeScalingType::kLinear, 2.0, 1.0, 4.0, 8};
       }},
  };
  for (const Variant& v : variants) {
    INFO(v.name);
    LlamaConfig c = TinyLlama();
    v.set(c);
    torch::manual_seed(9);
    auto lm = MakeCausalLm(Llama(c));
    // Prompt 11 > window 5: the prefill's band mask; 3-token steps after cached ones.
    CheckStepsAgainstForward(*lm, RandomIds(11, c.vocab_size, 1), RandomIds(14, c.vocab_size, 2), 11);
    CheckStepsAgainstForward(*lm, RandomIds(9, c.vocab_size, 3), RandomIds(3, c.vocab_size, 4), 3);
    CheckGreedyAgrees(*lm, RandomIds(6, c.vocab_size, 5), 20);
    CheckGreedyAgrees(*lm, RandomIds(6, c.vocab_size, 6), 50);  // past n_positions 48
  }
}

TEST_CASE("the transformers-made fixtures: cached steps equal the forward", "[kv_cache][llama][hf]") {
  OneThread();
  const std::string family = GENERATE("llama", "qwen2", "qwen3", "mistral");
  INFO(family);
  const std::string folder = kFixtures + family;
  const LlamaConfig config = ReadHfLlamaConfig(folder);
  Llama model(config, kUninitialised);
  {
    const TensorMap weights = MapHfLlamaWeights(folder, config);
    at::NoGradGuard no_grad;
    for (const auto& p : model->BlockParameters()) p.tensor.copy_(weights.at(p.name).to(at::kFloat));
  }
  auto lm = MakeCausalLm(model);
  {  // The weights laid out for one-token steps (UseRowVectorLayout) still give HF's logits.
    const TensorMap ref = LoadSafetensors(folder + "/reference.safetensors");
    at::NoGradGuard no_grad;
    CHECK(RelativeError(lm->Forward(ref.at("input_ids")), ref.at("logits")) < 1e-5);
  }
  // Llama: positions past the llama3 original context (32); Mistral: past its window (8).
  CheckStepsAgainstForward(*lm, RandomIds(10, config.vocab_size, 1), RandomIds(30, config.vocab_size, 2), 10);
  CheckGreedyAgrees(*lm, RandomIds(10, config.vocab_size, 3), 30);
}

TEST_CASE("a cache holds what it was sized for; GQA caches the kv heads only", "[kv_cache]") {
  OneThread();
  LlamaConfig c = TinyLlama();
  torch::manual_seed(1);
  auto lm = MakeCausalLm(Llama(c));
  at::NoGradGuard no_grad;
  KvCache cache = lm->NewCache(4);
  CHECK(cache.bytes() == 2 * c.n_layer * c.kv_heads() * 4 * c.head_width() * 4);
  lm->Step(Row({1, 2, 3}), cache);
  CHECK_THROWS_WITH(lm->Step(Row({4, 5}), cache), Catch::Contains("exceed the cache's 4"));
  CHECK(cache.length() == 3);
  lm->Step(Row({4}), cache);
  CHECK(cache.length() == 4);
  cache.Clear();
  CHECK(cache.length() == 0);
  CHECK_THROWS_WITH(lm->NewCache(49), Catch::Contains("must be in [1, n_positions 48]"));
}

}  // namespace ps::models
