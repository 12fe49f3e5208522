// GPT: shapes, parameter counts against the published GPT-2 sizes, parameter order
// and block ids, hook calls, and numerics against HF transformers (fixture generated
// once by tools/gen_gpt_fixture.py).
#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <torch/autograd.h>
#include <torch/nn/functional/loss.h>

#include <set>

#include "models/gpt.h"
#include "models/hf_gpt2.h"
#include "models/safetensors.h"
#include "tests/catch.h"

namespace ps::models {
namespace {

int BlockParamIndex(const GptImpl& model, const std::string& name) {
  const auto params = model.BlockParameters();
  for (size_t i = 0; i < params.size(); ++i) {
    if (params[i].name == name) return static_cast<int>(i);
  }
  FAIL("no parameter " << name);
  return -1;
}

// Every parameter's gradient, in BlockParameters() order (copies).
std::vector<at::Tensor> Grads(const GptImpl& model) {
  std::vector<at::Tensor> out;
  for (const auto& p : model.BlockParameters()) out.push_back(p.tensor.grad().clone());
  return out;
}

void CheckSameGrads(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b, double rtol, double atol) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("parameter " << i);
    CHECK(at::allclose(a[i], b[i], rtol, atol));
  }
}

GptConfig Tiny() {
  GptConfig c;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = 32;
  c.n_positions = 16;
  c.vocab_size = 50;
  return c;
}

TEST_CASE("forward shapes and sequence-length check", "[gpt]") {
  Gpt model(Tiny());
  auto idx = at::randint(0, 50, {3, 10}, at::kLong);
  auto logits = model->forward(idx);
  CHECK(logits.sizes() == at::IntArrayRef({3, 10, 50}));
  CHECK(model->Loss(idx, idx).dim() == 0);
  CHECK_THROWS_WITH(model->forward(at::zeros({1, 17}, at::kLong)),
                    Catch::Contains("sequence length 17 exceeds model.n_positions 16"));
}

TEST_CASE("parameter counts match the published GPT-2 sizes", "[gpt]") {
  // HF GPT2LMHeadModel sizes with tied embeddings.
  const std::pair<const char*, int64_t> published[] = {
      {"gpt2-124m", 124439808}, {"gpt2-350m", 354823168}, {"gpt2-774m", 774030080}, {"gpt2-1.5b", 1557611200}};
  for (const auto& [name, count] : published) {
    INFO(name);
    auto preset = FindGptPreset(name);
    REQUIRE(preset);
    GptConfig c;
    c.n_layer = preset->n_layer;
    c.n_head = preset->n_head;
    c.n_embd = preset->n_embd;
    c.n_positions = preset->n_positions;
    c.vocab_size = preset->vocab_size;
    CHECK(GptParameterCount(c) == count);
  }
  // The module itself agrees with the formula (built for real at 124M).
  GptConfig c;
  c.n_layer = 12;
  c.n_head = 12;
  c.n_embd = 768;
  c.n_positions = 1024;
  c.vocab_size = 50257;
  Gpt model(c);
  const auto counts = model->CountParameters();
  CHECK(counts.total_numel == 124439808);
  CHECK(counts.embedding_numel == 50257 * 768 + 1024 * 768);
  CHECK(counts.non_embedding_numel == 124439808 - 50257 * 768 - 1024 * 768);
  int64_t module_total = 0;
  for (const auto& p : model->parameters()) module_total += p.numel();
  CHECK(module_total == 124439808);
}

TEST_CASE("GptParameterShapes describes BlockParameters without building", "[gpt]") {
  for (bool tied : {true, false}) {
    GptConfig c = Tiny();
    c.tie_word_embeddings = tied;
    Gpt model(c);
    const auto built = model->BlockParameters();
    const auto shapes = GptParameterShapes(c);
    REQUIRE(shapes.size() == built.size());
    for (size_t i = 0; i < built.size(); ++i) {
      INFO(built[i].name);
      CHECK(shapes[i].name == built[i].name);
      CHECK(shapes[i].numel == built[i].tensor.numel());
      CHECK(shapes[i].used_by_blocks == built[i].used_by_blocks);
    }
  }
}

TEST_CASE("untied LM head adds vocab x n_embd parameters", "[gpt]") {
  GptConfig c = Tiny();
  c.tie_word_embeddings = false;
  Gpt model(c);
  CHECK(model->CountParameters().total_numel == GptParameterCount(Tiny()) + 50 * 32);
  CHECK(GptParameterCount(c) == GptParameterCount(Tiny()) + 50 * 32);
}

TEST_CASE("BlockParameters lists every parameter once, in forward order", "[gpt]") {
  Gpt model(Tiny());
  const auto params = model->BlockParameters();
  std::set<const void*> seen;
  int last_block = 0;
  for (const auto& p : params) {
    CHECK(seen.insert(p.tensor.unsafeGetTensorImpl()).second);
    CHECK(p.block_id >= last_block);
    last_block = p.block_id;
  }
  CHECK(seen.size() == model->parameters().size());
  CHECK(params.front().name == "wte.weight");
  CHECK(params[2].name == "h.0.ln_1.weight");
  CHECK(params[2].block_id == 1);
  CHECK(params.back().name == "ln_f.bias");
  CHECK(params.back().block_id == model->num_blocks() - 1);
}

// Records hook calls; PostForward returns the output unchanged.
class RecordingHooks : public LayerHooks {
 public:
  void PreForward(int block_id) override { calls.push_back("pre" + std::to_string(block_id)); }
  at::Tensor PostForward(int block_id, at::Tensor out) override {
    calls.push_back("post" + std::to_string(block_id));
    return out;
  }
  std::vector<std::string> calls;
};

TEST_CASE("layer hooks see every block in order and do not change results", "[gpt][hooks]") {
  Gpt model(Tiny());
  model->eval();
  auto idx = at::randint(0, 50, {2, 8}, at::kLong);
  RecordingHooks hooks;
  auto with = model->forward(idx, &hooks);
  auto without = model->forward(idx);
  CHECK(at::equal(with, without));
  CHECK(hooks.calls == std::vector<std::string>{"pre0", "post0", "pre1", "post1", "pre2", "post2", "pre3", "post3"});
}

TEST_CASE("same seed, same weights; dropout only in training mode", "[gpt]") {
  GptConfig c = Tiny();
  c.dropout = 0.5;
  at::manual_seed(3);
  Gpt a(c);
  at::manual_seed(3);
  Gpt b(c);
  auto idx = at::randint(0, 50, {2, 8}, at::kLong);
  a->eval();
  b->eval();
  CHECK(at::equal(a->forward(idx), b->forward(idx)));
  a->train();
  CHECK_FALSE(at::allclose(a->forward(idx), b->forward(idx)));
}

TEST_CASE("activation checkpointing gives the same loss and gradients, dropout included", "[gpt][checkpoint]") {
  GptConfig c = Tiny();
  c.dropout = 0.2;
  auto idx = at::randint(0, 50, {2, 12}, at::kLong);
  std::vector<std::vector<at::Tensor>> grads;
  std::vector<double> losses;
  for (bool checkpoint : {false, true}) {
    c.activation_checkpointing = checkpoint;
    at::manual_seed(7);
    Gpt model(c);
    model->train();
    auto loss = model->Loss(idx, idx);
    loss.backward();
    losses.push_back(loss.item<double>());
    grads.push_back(Grads(*model));
  }
  CHECK(losses[0] == losses[1]);
  CheckSameGrads(grads[0], grads[1], 1e-6, 1e-7);
}

TEST_CASE("activation checkpointing under bf16 autocast: the recompute runs in bf16 as forward did", "[gpt][checkpoint]") {
  // The plain engine's mixed precision: forward under autocast, backward outside it.
  GptConfig c = Tiny();
  auto idx = at::randint(0, 50, {2, 12}, at::kLong);
  std::vector<std::vector<at::Tensor>> grads;
  std::vector<double> losses;
  for (bool checkpoint : {false, true}) {
    c.activation_checkpointing = checkpoint;
    at::manual_seed(5);
    Gpt model(c);
    model->train();
    at::autocast::set_autocast_enabled(at::kCPU, true);
    at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
    auto loss = model->Loss(idx, idx);
    at::autocast::set_autocast_enabled(at::kCPU, false);
    at::autocast::clear_cache();
    loss.backward();
    CHECK_FALSE(at::autocast::is_autocast_enabled(at::kCPU));  // the recompute put it back
    losses.push_back(loss.item<double>());
    grads.push_back(Grads(*model));
  }
  CHECK(losses[0] == losses[1]);
  // An fp32 recompute would differ at bf16's ~1e-2.
  CheckSameGrads(grads[0], grads[1], 1e-5, 1e-7);
}

TEST_CASE("LeafLinear layers: same loss and gradients as at::linear; backward reads the re-pointed weight", "[gpt][leaf]") {
  GptConfig c = Tiny();
  auto idx = at::randint(0, 50, {3, 10}, at::kLong);
  std::vector<std::vector<at::Tensor>> grads;
  std::vector<double> losses;
  for (bool leaf : {false, true}) {
    at::manual_seed(9);
    Gpt model(c);
    model->set_save_weight_leaves(leaf);
    auto loss = model->Loss(idx, idx);
    loss.backward();
    losses.push_back(loss.item<double>());
    grads.push_back(Grads(*model));
  }
  CHECK(losses[0] == losses[1]);  // the forward is at::linear itself
  CheckSameGrads(grads[0], grads[1], 1e-5, 1e-7);
  // What the chunk runtime does between forward and backward: the weight's data is
  // swapped for other storage with the same values. The old storage must not be pinned
  // by the graph, and backward must use the new data.
  at::manual_seed(9);
  Gpt model(c);
  model->set_save_weight_leaves(true);
  auto& w = model->h[0]->as<BlockImpl>()->mlp->c_fc->weight;
  auto loss = model->Loss(idx, idx);
  at::Tensor old_data = w.data();
  const auto uses_before = old_data.storage().use_count();
  w.set_data(old_data.clone());
  CHECK(old_data.storage().use_count() < uses_before);  // the graph held only the leaf
  {
    at::NoGradGuard no_grad;
    old_data.fill_(1e6);  // a stale view in the graph would now poison the gradients
  }
  loss.backward();
  CHECK(at::allclose(w.grad(), grads[1][BlockParamIndex(*model, "h.0.mlp.c_fc.weight")], 1e-5, 1e-7));
}

TEST_CASE("recompute calls the block's pre-forward hook again in backward", "[gpt][checkpoint]") {
  GptConfig c = Tiny();
  c.activation_checkpointing = true;
  Gpt model(c);
  model->train();
  RecordingHooks hooks;
  auto idx = at::randint(0, 50, {2, 8}, at::kLong);
  auto loss = model->Loss(idx, idx, &hooks);
  const size_t forward_calls = hooks.calls.size();
  loss.backward();
  std::vector<std::string> recompute(hooks.calls.begin() + forward_calls, hooks.calls.end());
  CHECK(recompute == std::vector<std::string>{"pre2", "pre1"});  // blocks recomputed in backward order
}

// An identity node after each block output that records "bwd<block>" when backward
// reaches it, as the chunk runtime's pre-backward node does (chunkmem/pre_backward.h).
struct RecordBackward : public torch::autograd::Function<RecordBackward> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, int64_t block,
                            int64_t calls) {
    ctx->saved_data["block"] = block;
    ctx->saved_data["calls"] = calls;
    return x.detach();
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* calls = reinterpret_cast<std::vector<std::string>*>(ctx->saved_data["calls"].toInt());
    calls->push_back("bwd" + std::to_string(ctx->saved_data["block"].toInt()));
    return {grads[0], at::Tensor(), at::Tensor()};
  }
};

class BackwardRecordingHooks : public RecordingHooks {
 public:
  at::Tensor PostForward(int block_id, at::Tensor out) override {
    RecordingHooks::PostForward(block_id, out);
    return RecordBackward::apply(out, block_id, reinterpret_cast<int64_t>(&calls));
  }
};

TEST_CASE("LossMany: each micro-batch's loss, their summed gradients, forward and backward block-major",
          "[gpt][vertical]") {
  GptConfig c = Tiny();
  c.activation_checkpointing = true;
  const int k = 3;
  std::vector<at::Tensor> idx;
  for (int m = 0; m < k; ++m) idx.push_back(at::randint(0, 50, {2, 8}, at::kLong));
  at::manual_seed(11);
  Gpt horizontal(c);
  horizontal->train();
  std::vector<double> expected;
  for (int m = 0; m < k; ++m) {  // the horizontal schedule: one micro-batch after the other
    auto loss = horizontal->Loss(idx[m], idx[m]);
    expected.push_back(loss.item<double>());
    loss.backward();
  }
  at::manual_seed(11);
  Gpt vertical(c);
  vertical->train();
  BackwardRecordingHooks hooks;
  const std::vector<at::Tensor> losses = vertical->LossMany(idx, idx, &hooks);
  REQUIRE(losses.size() == k);
  for (int m = 0; m < k; ++m) CHECK(losses[m].item<double>() == expected[m]);  // the same operations
  // Forward: each block once (its chunks fetched once), for every micro-batch.
  const std::vector<std::string> forward = {"pre0", "post0", "post0", "post0", "pre1", "post1", "post1", "post1",
                                            "pre2", "post2", "post2", "post2", "pre3", "post3", "post3", "post3"};
  CHECK(hooks.calls == forward);
  (losses[0] + losses[1] + losses[2]).backward();
  // Backward block by block: a block's every micro-batch (its pre-backward node, then
  // its recompute, the head's included) before the block below.
  const std::vector<std::string> backward(hooks.calls.begin() + forward.size(), hooks.calls.end());
  CHECK(backward == std::vector<std::string>{"bwd3", "bwd3", "bwd3", "pre3", "pre3", "pre3", "bwd2", "bwd2", "bwd2",
                                             "pre2", "pre2", "pre2", "bwd1", "bwd1", "bwd1", "pre1", "pre1", "pre1",
                                             "bwd0", "bwd0", "bwd0"});
  CheckSameGrads(Grads(*horizontal), Grads(*vertical), 1e-5, 1e-7);  // summed in another order: fp32 rounding
  // Without checkpointing it would keep every micro-batch's activations: refused.
  c.activation_checkpointing = false;
  Gpt plain(c);
  plain->train();
  CHECK_THROWS_WITH(plain->LossMany(idx, idx), Catch::Contains("activation_checkpointing"));
  plain->eval();  // no gradients, nothing kept: allowed
  at::NoGradGuard no_grad;
  CHECK(plain->LossMany(idx, idx).size() == k);
}

TEST_CASE("logits and loss match HF transformers GPT2LMHeadModel", "[gpt][hf]") {
  auto state = LoadSafetensors("tests/models/testdata/gpt2_tiny_hf.safetensors");
  GptConfig c;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = 64;
  c.n_positions = 32;
  c.vocab_size = 101;
  Gpt model(c);
  model->eval();
  const auto ids = state.at("fixture.input_ids");
  const auto expected_logits = state.at("fixture.logits");
  const double expected_loss = state.at("fixture.loss").item<double>();
  std::map<std::string, at::Tensor> weights;
  for (const auto& [k, v] : state) {
    if (k.rfind("fixture.", 0) != 0) weights[k] = v;
  }
  LoadHfGpt2(model, weights);
  at::NoGradGuard no_grad;
  auto logits = model->forward(ids);
  const double max_diff = (logits - expected_logits).abs().max().item<double>();
  INFO("max |logits - HF| = " << max_diff);
  CHECK(max_diff < 1e-4);
  // HF's labels=input_ids loss: predict token t+1 from position t.
  const int64_t T = ids.size(1);
  auto loss = torch::nn::functional::cross_entropy(logits.narrow(1, 0, T - 1).reshape({-1, c.vocab_size}),
                                                   ids.narrow(1, 1, T - 1).reshape({-1}));
  CHECK(loss.item<double>() == Approx(expected_loss).epsilon(1e-5));
  CHECK(model->Loss(ids.narrow(1, 0, T - 1), ids.narrow(1, 1, T - 1)).item<double>() ==
        Approx(expected_loss).epsilon(1e-5));
}

TEST_CASE("HF mapping rejects missing, misshapen and unexpected weights", "[gpt][hf]") {
  Gpt model(Tiny());
  std::map<std::string, at::Tensor> hf;
  for (const auto& p : model->BlockParameters()) hf["transformer." + p.name] = p.tensor.detach().clone();
  // Conv1D weights are stored [in, out] by HF.
  for (auto& [k, v] : hf) {
    if (k.find("c_attn.weight") != std::string::npos || k.find("c_proj.weight") != std::string::npos ||
        k.find("c_fc.weight") != std::string::npos) {
      v = v.t().contiguous();
    }
  }
  CHECK_NOTHROW(LoadHfGpt2(model, hf));
  auto missing = hf;
  missing.erase("transformer.h.1.mlp.c_fc.bias");
  CHECK_THROWS_WITH(LoadHfGpt2(model, missing), Catch::Contains("missing 'h.1.mlp.c_fc.bias'"));
  auto wrong = hf;
  wrong["transformer.wpe.weight"] = at::zeros({3, 3});
  CHECK_THROWS_WITH(LoadHfGpt2(model, wrong), Catch::Contains("'wpe.weight' has shape [3, 3]"));
  auto extra = hf;
  extra["transformer.h.9.attn.c_attn.weight"] = at::zeros({1});
  CHECK_THROWS_WITH(LoadHfGpt2(model, extra), Catch::Contains("unexpected key 'h.9.attn.c_attn.weight'"));
}

}  // namespace
}  // namespace ps::models
