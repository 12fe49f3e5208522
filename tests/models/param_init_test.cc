// Per-parameter initial values (models/param_init.h, issue #9 §4): each parameter's
// values depend only on the run seed, its name and its shape (not on where they are
// written, the order, or the threads), follow the model's distribution, and differ
// between seeds and between parameters.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <cmath>
#include <map>

#include "models/bert.h"
#include "models/gpt.h"
#include "models/param_init.h"
#include "tests/catch.h"

namespace ps::models {
namespace {

GptConfig Gpt4() {
  GptConfig c;
  c.n_layer = 4;
  c.n_head = 4;
  c.n_embd = 256;
  c.n_positions = 64;
  c.vocab_size = 512;
  c.init_std = 0.02;
  return c;
}

BertConfig Bert2() {
  BertConfig c;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = 128;
  c.vocab_size = 300;
  c.init_std = 0.05;
  c.num_labels = 3;
  return c;
}

at::Tensor GptValues(const GptConfig& c, const std::string& name, at::IntArrayRef shape, uint64_t seed) {
  at::Tensor t = at::empty(shape);
  InitGptParameter(c, name, t, seed);
  return t;
}

std::map<std::string, at::Tensor> Snapshot(const std::vector<BlockParameter>& params) {
  std::map<std::string, at::Tensor> out;
  for (const auto& p : params) out[p.name] = p.tensor.detach().clone();
  return out;
}

TEST_CASE("ParameterSeed depends on the run seed and the name, and on nothing else", "[init]") {
  CHECK(ParameterSeed(1, "h.0.attn.c_attn.weight") == ParameterSeed(1, "h.0.attn.c_attn.weight"));
  CHECK(ParameterSeed(1, "h.0.attn.c_attn.weight") != ParameterSeed(2, "h.0.attn.c_attn.weight"));
  CHECK(ParameterSeed(1, "h.0.attn.c_attn.weight") != ParameterSeed(1, "h.1.attn.c_attn.weight"));
  CHECK(ParameterSeed(0, "") != ParameterSeed(1, ""));
}

TEST_CASE("GPT init: N(0, init_std), residual projections scaled by 1/sqrt(2 n_layer), norms 1/0, biases 0",
          "[init]") {
  const GptConfig c = Gpt4();
  const at::Tensor fc = GptValues(c, "h.1.mlp.c_fc.weight", {1024, 256}, 7);  // 262k values
  CHECK(std::abs(fc.mean().item<double>()) < 0.02 * 0.01);
  CHECK(fc.std().item<double>() == Approx(0.02).epsilon(0.01));
  const double proj_std = 0.02 / std::sqrt(2.0 * 4);
  for (const char* name : {"h.2.attn.c_proj.weight", "h.0.mlp.c_proj.weight"}) {
    INFO(name);
    const at::Tensor proj = GptValues(c, name, {256, 1024}, 7);
    CHECK(proj.std().item<double>() == Approx(proj_std).epsilon(0.01));
    CHECK(std::abs(proj.mean().item<double>()) < proj_std * 0.01);
  }
  CHECK(GptValues(c, "wte.weight", {512, 256}, 7).std().item<double>() == Approx(0.02).epsilon(0.01));
  CHECK(at::equal(GptValues(c, "h.3.ln_2.weight", {256}, 7), at::ones({256})));
  CHECK(at::equal(GptValues(c, "ln_f.weight", {256}, 7), at::ones({256})));
  for (const char* name : {"h.3.ln_2.bias", "ln_f.bias", "h.0.attn.c_attn.bias", "h.1.mlp.c_proj.bias"}) {
    INFO(name);
    CHECK(at::equal(GptValues(c, name, {256}, 7), at::zeros({256})));
  }
}

TEST_CASE("GPT init: the same seed and name give the same values wherever they are written; others differ",
          "[init]") {
  const GptConfig c = Gpt4();
  const at::Tensor own = GptValues(c, "h.0.attn.c_attn.weight", {768, 256}, 11);
  // A slot in a larger buffer, as in a chunk: the same values, bitwise.
  at::Tensor chunk = at::zeros({768 * 256 + 96});
  at::Tensor slot = chunk.narrow(0, 32, 768 * 256).view({768, 256});
  InitGptParameter(c, "h.0.attn.c_attn.weight", slot, 11);
  CHECK(at::equal(own, slot));
  CHECK(chunk.narrow(0, 0, 32).abs().sum().item<double>() == 0.0);  // nothing outside the slot
  CHECK(chunk.narrow(0, 32 + 768 * 256, 64).abs().sum().item<double>() == 0.0);
  CHECK(!at::equal(own, GptValues(c, "h.0.attn.c_attn.weight", {768, 256}, 12)));
  CHECK(!at::equal(own, GptValues(c, "h.1.attn.c_attn.weight", {768, 256}, 11)));
}

TEST_CASE("BERT init: N(0, init_std), padding row 0, norms 1/0, biases 0 (the MLM bias too)", "[init]") {
  BertConfig c = Bert2();
  c.num_labels = 0;
  Bert model(c, kUninitialised);
  const InitPlan plan{5, {}};
  InitParameters(model->BlockParameters(), plan, [&](const std::string& name, at::Tensor values) {
    InitBertParameter(c, name, std::move(values), plan.seed);
  });
  for (const auto& p : model->BlockParameters()) {
    INFO(p.name);
    const at::Tensor v = p.tensor.detach();
    if (p.name.find("LayerNorm.weight") != std::string::npos) {
      CHECK(at::equal(v, at::ones_like(v)));
    } else if (p.tensor.dim() == 1) {
      CHECK(at::equal(v, at::zeros_like(v)));
    } else if (p.name == "embeddings.word_embeddings.weight") {
      CHECK(at::equal(v[0], at::zeros({128})));
      CHECK(v.narrow(0, 1, 299).std().item<double>() == Approx(0.05).epsilon(0.02));
    } else if (v.numel() >= 128 * 128) {
      CHECK(v.std().item<double>() == Approx(0.05).epsilon(0.03));
      CHECK(std::abs(v.mean().item<double>()) < 0.05 * 0.03);
    }
  }
}

TEST_CASE("InitParameters: the same values on 1 and 2 threads, and only the parameters the plan initialises",
          "[init]") {
  const GptConfig c = Gpt4();
  const int threads = at::get_num_threads();
  auto init_with = [&](int n, const InitPlan& plan) {
    at::set_num_threads(n);
    Gpt model(c, kUninitialised);
    for (const auto& p : model->BlockParameters()) p.tensor.detach().fill_(-7.0);  // "unwritten"
    InitParameters(model->BlockParameters(), plan, [&](const std::string& name, at::Tensor values) {
      InitGptParameter(c, name, std::move(values), plan.seed);
    });
    return Snapshot(model->BlockParameters());
  };
  const auto one = init_with(1, {3, {}});
  const auto two = init_with(2, {3, {}});
  at::set_num_threads(threads);
  REQUIRE(one.size() == two.size());
  for (const auto& [name, t] : one) {
    INFO(name);
    CHECK(at::equal(t, two.at(name)));
    CHECK(t.ne(-7.0).all().item<bool>());
  }
  const auto skipping = init_with(2, {3, {"wte.weight", "h.1.mlp.c_fc.weight"}});
  at::set_num_threads(threads);
  CHECK(skipping.at("wte.weight").eq(-7.0).all().item<bool>());
  CHECK(skipping.at("h.1.mlp.c_fc.weight").eq(-7.0).all().item<bool>());
  CHECK(at::equal(skipping.at("h.0.mlp.c_fc.weight"), one.at("h.0.mlp.c_fc.weight")));
}

TEST_CASE("Models built without init have the real shapes; built with init, torch::manual_seed decides them",
          "[init]") {
  const GptConfig c = Gpt4();
  Gpt bare(c, kUninitialised);
  CHECK(bare->h[0]->as<BlockImpl>()->mlp->c_fc->weight.sizes() == at::IntArrayRef({1024, 256}));
  CHECK(bare->h[0]->as<BlockImpl>()->mlp->c_fc->options.in_features() == 256);
  CHECK(bare->h[0]->as<BlockImpl>()->mlp->c_fc->options.out_features() == 1024);
  CHECK(bare->wte->weight.sizes() == at::IntArrayRef({512, 256}));
  CHECK(bare->wte->options.num_embeddings() == 512);
  CHECK(bare->CountParameters().total_numel == Gpt(c)->CountParameters().total_numel);
  Bert bert_bare(Bert2(), kUninitialised);
  CHECK(bert_bare->CountParameters().total_numel == Bert(Bert2())->CountParameters().total_numel);

  at::manual_seed(4);
  const auto a = Snapshot(Gpt(c)->BlockParameters());
  at::manual_seed(4);
  const auto b = Snapshot(Gpt(c)->BlockParameters());
  at::manual_seed(5);
  const auto d = Snapshot(Gpt(c)->BlockParameters());
  CHECK(at::equal(a.at("h.0.attn.c_attn.weight"), b.at("h.0.attn.c_attn.weight")));
  CHECK(!at::equal(a.at("h.0.attn.c_attn.weight"), d.at("h.0.attn.c_attn.weight")));
  CHECK(a.at("h.0.attn.c_proj.weight").std().item<double>() ==
        Approx(0.02 / std::sqrt(8.0)).epsilon(0.05));
}

}  // namespace
}  // namespace ps::models
