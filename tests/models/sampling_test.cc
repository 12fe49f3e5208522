// Next-token choice (models/sampling.h) against hand-computed cases: greedy is argmax,
// top-k keeps the k largest (ties kept), top-p keeps the smallest prefix of the sorted
// distribution reaching p (the most likely always), a seed fixes the draws, and the
// draws follow the filtered distribution. Generate stops at any stop token, such as the
// eos ids of an HF folder's generation_config.json (an id or a list; config.json's as
// the fallback). Cached against uncached generation: kv_cache_test.cc.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include "models/causal_lm.h"
#include "models/gpt.h"
#include "models/hf_folder.h"
#include "models/sampling.h"
// Last: c10 headers define a glog-style CHECK that Catch must override.
#include "tests/catch.h"
#include "tests/temp_dir.h"

namespace ps::models {
namespace {

std::vector<bool> Kept(const at::Tensor& filtered) {
  std::vector<bool> out;
  for (int64_t i = 0; i < filtered.numel(); ++i) out.push_back(std::isfinite(filtered[i].item<float>()));
  return out;
}

TEST_CASE("top-k and top-p keep what they should") {
  const at::Tensor logits = at::tensor({1.0f, 3.0f, 2.0f, 3.0f, 0.5f});
  CHECK(Kept(FilterLogits(logits, 0, 1.0)) == std::vector<bool>{true, true, true, true, true});
  CHECK(Kept(FilterLogits(logits, 1, 1.0)) == std::vector<bool>{false, true, false, true, false});  // tie at the top
  CHECK(Kept(FilterLogits(logits, 3, 1.0)) == std::vector<bool>{false, true, true, true, false});
  // Probabilities of [1, 3, 2, 3, 0.5]: 3s ~0.38 each, 2 ~0.14, 1 ~0.05, 0.5 ~0.03.
  CHECK(Kept(FilterLogits(logits, 0, 0.3)) == std::vector<bool>{false, true, false, false, false});
  CHECK(Kept(FilterLogits(logits, 0, 0.7)) == std::vector<bool>{false, true, false, true, false});
  CHECK(Kept(FilterLogits(logits, 0, 0.9)) == std::vector<bool>{false, true, true, true, false});
  // The most likely survives any p (of the tie, the first in stable order).
  CHECK(Kept(FilterLogits(logits, 0, 1e-9)) == std::vector<bool>{false, true, false, false, false});
  CHECK_THROWS_WITH(FilterLogits(logits, 0, 0.0), Catch::Contains("top_p must be in (0, 1]"));
  CHECK_THROWS_WITH(FilterLogits(logits, -1, 1.0), Catch::Contains("top_k must be >= 0"));
}

TEST_CASE("greedy takes the argmax; a seed fixes the draws; draws follow the distribution") {
  at::Generator g = at::make_generator<at::CPUGeneratorImpl>(7);
  SamplingOptions greedy;
  greedy.temperature = 0.0;
  CHECK(NextToken(at::tensor({0.1f, 2.0f, 1.0f}), greedy, g) == 1);

  SamplingOptions sample;
  sample.top_k = 2;
  const at::Tensor logits = at::tensor({0.0f, std::log(3.0f), -5.0f, 0.0f + 1e-3f});
  std::map<int64_t, int> counts;
  for (int i = 0; i < 4000; ++i) ++counts[NextToken(logits, sample, g)];
  CHECK(counts.count(2) == 0);  // outside the top 2
  CHECK(counts.count(0) == 0);
  CHECK(counts[1] / 4000.0 == Approx(0.75).margin(0.03));  // 3 : 1

  at::Generator a = at::make_generator<at::CPUGeneratorImpl>(11), b = at::make_generator<at::CPUGeneratorImpl>(11);
  std::vector<int64_t> da, db;
  for (int i = 0; i < 50; ++i) {
    da.push_back(NextToken(logits, SamplingOptions{}, a));
    db.push_back(NextToken(logits, SamplingOptions{}, b));
  }
  CHECK(da == db);
  // A temperature so small that logits / temperature overflows: the argmax, not an error.
  SamplingOptions tiny;
  tiny.temperature = 1e-300;
  for (int i = 0; i < 5; ++i) CHECK(NextToken(at::tensor({0.1f, 2.0f, 1.0f}), tiny, g) == 1);
}

TEST_CASE("Generate appends tokens, keeps to the window and stops at a stop token") {
  GptConfig c;
  c.n_layer = 1;
  c.n_head = 2;
  c.n_embd = 16;
  c.n_positions = 8;
  c.vocab_size = 11;
  torch::manual_seed(3);
  Gpt model(c);
  auto lm = MakeCausalLm(model);
  at::Generator g = at::make_generator<at::CPUGeneratorImpl>(1);
  SamplingOptions greedy;
  greedy.temperature = 0.0;
  greedy.max_new_tokens = 20;  // longer than the window
  for (const bool cache : {true, false}) {
    greedy.use_cache = cache;
    const Generation out = Generate(*lm, {1, 2, 3}, greedy, g);
    REQUIRE(out.tokens.size() == 20);
    CHECK(!out.stats.stopped);
    // Greedy's first token is the argmax of the prompt's last logits.
    at::NoGradGuard no_grad;
    const at::Tensor logits = model->forward(at::tensor(std::vector<int64_t>{1, 2, 3}).unsqueeze(0));
    CHECK(out.tokens[0] == logits[0][2].argmax().item<int64_t>());
    SamplingOptions stop = greedy;
    stop.stop_tokens = {out.tokens[0]};
    const Generation stopped = Generate(*lm, {1, 2, 3}, stop, g);
    CHECK(stopped.tokens == std::vector<int64_t>{out.tokens[0]});
    CHECK(stopped.stats.stopped);
  }
  CHECK_THROWS_WITH(Generate(*lm, {}, greedy, g), Catch::Contains("no tokens"));
  CHECK_THROWS_WITH(Generate(*lm, {11}, greedy, g), Catch::Contains("not < vocab_size 11"));
}

TEST_CASE("the eos ids of generation_config.json (an id or a list), else config.json's, stop generation") {
  namespace fs = std::filesystem;
  const fs::path folder = fs::path(ps::testing::TempDir()) / "eos_folder";
  fs::remove_all(folder);
  fs::create_directories(folder);
  auto write = [&](const char* name, const std::string& json) { std::ofstream(folder / name) << json; };
  CHECK(ReadHfEosTokenIds(folder.string()).empty());
  write("config.json", R"({"eos_token_id": 4})");
  CHECK(ReadHfEosTokenIds(folder.string()) == std::vector<int64_t>{4});
  write("generation_config.json", R"({"bos_token_id": 1, "eos_token_id": null})");
  CHECK(ReadHfEosTokenIds(folder.string()) == std::vector<int64_t>{4});  // null: config.json's
  write("generation_config.json", R"({"eos_token_id": "</s>"})");
  CHECK_THROWS_WITH(ReadHfEosTokenIds(folder.string()),
                    Catch::Contains("generation_config.json: eos_token_id is neither an id nor a list of ids"));

  GptConfig c;
  c.n_layer = 1;
  c.n_head = 2;
  c.n_embd = 16;
  c.n_positions = 32;
  c.vocab_size = 11;
  c.init_std = 0.3;
  torch::manual_seed(4);
  auto lm = MakeCausalLm(Gpt(c));
  at::Generator g = at::make_generator<at::CPUGeneratorImpl>(1);
  SamplingOptions greedy;
  greedy.temperature = 0.0;
  greedy.max_new_tokens = 12;
  const std::vector<int64_t> free_run = Generate(*lm, {1, 2}, greedy, g).tokens;
  REQUIRE(free_run.size() == 12);
  // A list whose first id never comes and whose second is the run's first token that
  // did not appear before it (so the stop is there).
  size_t at = 1;
  while (at < free_run.size() &&
         std::find(free_run.begin(), free_run.begin() + at, free_run[at]) != free_run.begin() + at) {
    ++at;
  }
  REQUIRE(at < free_run.size());
  int64_t absent = 0;
  while (std::find(free_run.begin(), free_run.end(), absent) != free_run.end()) ++absent;
  write("generation_config.json",
        "{\"eos_token_id\": [" + std::to_string(absent) + ", " + std::to_string(free_run[at]) + "]}");
  greedy.stop_tokens = ReadHfEosTokenIds(folder.string());
  CHECK(greedy.stop_tokens == std::vector<int64_t>{absent, free_run[at]});
  const Generation stopped = Generate(*lm, {1, 2}, greedy, g);
  CHECK(stopped.stats.stopped);
  CHECK(stopped.tokens == std::vector<int64_t>(free_run.begin(), free_run.begin() + at + 1));
}

}  // namespace
}  // namespace ps::models
