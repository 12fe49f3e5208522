// Next-token choice (models/sampling.h) against hand-computed cases: greedy is argmax,
// top-k keeps the k largest (ties kept), top-p keeps the smallest prefix of the sorted
// distribution reaching p (the most likely always), a seed fixes the draws, and the
// draws follow the filtered distribution. Generate stops at the stop token.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <map>

#include "models/gpt.h"
#include "models/sampling.h"
// Last: c10 headers define a glog-style CHECK that Catch must override.
#include "tests/catch.h"

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
}

TEST_CASE("Generate appends tokens, keeps to the window and stops at the stop token") {
  GptConfig c;
  c.n_layer = 1;
  c.n_head = 2;
  c.n_embd = 16;
  c.n_positions = 8;
  c.vocab_size = 11;
  torch::manual_seed(3);
  Gpt model(c);
  at::Generator g = at::make_generator<at::CPUGeneratorImpl>(1);
  SamplingOptions greedy;
  greedy.temperature = 0.0;
  greedy.max_new_tokens = 20;  // longer than the window
  const auto out = Generate(model, {1, 2, 3}, greedy, g);
  CHECK(out.size() == 20);
  // Greedy's first token is the argmax of the prompt's last logits.
  {
    at::NoGradGuard no_grad;
    const at::Tensor logits = model->forward(at::tensor(std::vector<int64_t>{1, 2, 3}).unsqueeze(0));
    CHECK(out[0] == logits[0][2].argmax().item<int64_t>());
  }
  greedy.stop_token = out[0];
  CHECK(Generate(model, {1, 2, 3}, greedy, g) == std::vector<int64_t>{out[0]});
  CHECK_THROWS_WITH(Generate(model, {}, greedy, g), Catch::Contains("no tokens"));
  CHECK_THROWS_WITH(Generate(model, {11}, greedy, g), Catch::Contains("not < vocab_size 11"));
}

}  // namespace
}  // namespace ps::models
