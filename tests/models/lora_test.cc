// LoRA adapters (models/lora.h) on the Llama family and GPT-2: where they attach and
// what they are named, PEFT's initialisation, the forward against the merged weights
// W + scale * B A, gradients only for the adapters (with activation checkpointing too),
// rsLoRA's scale, dropout, and errors naming the model's modules; PEFT adapter folders
// (models/peft_adapter.h) read back as written, and refused when malformed.
#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "models/lora.h"
#include "models/peft_adapter.h"
#include "models/trainable_models.h"
#include "tests/catch.h"
#include "tests/temp_dir.h"

namespace ps::models {
namespace {

namespace fs = std::filesystem;

LlamaConfig TinyLlama() {
  LlamaConfig c;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_kv_head = 2;
  c.n_embd = 32;
  c.head_dim = 8;
  c.intermediate_size = 48;
  c.n_positions = 32;
  c.vocab_size = 64;
  c.qkv_bias = true;
  return c;
}

GptConfig TinyGpt() {
  GptConfig c;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = 32;
  c.n_positions = 32;
  c.vocab_size = 64;
  return c;
}

const std::vector<std::string> kAllLlama = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};

LoraConfig Lora(std::vector<std::string> targets, int64_t r = 4, double alpha = 8) {
  LoraConfig l;
  l.enabled = true;
  l.r = r;
  l.alpha = alpha;
  l.target_modules = std::move(targets);
  return l;
}

// Every parameter of `model` initialised as the engines do, from `seed`.
void InitAll(TrainableModel& model, uint64_t seed) {
  InitParameters(model.BlockParameters(), InitPlan{seed, {}},
                 [&](const std::string& name, at::Tensor values) { model.InitParameter(name, values, seed); });
}

// The adapter factors random (B too, so the adapters change the output).
void RandomiseAdapters(TrainableModel& model) {
  at::NoGradGuard no_grad;
  for (const auto& p : model.BlockParameters()) {
    if (IsLoraParameter(p.name)) p.tensor.normal_(0.0, 0.2);
  }
}

at::Tensor Tokens(int64_t vocab) { return at::randint(vocab, {2, 12}, at::kLong); }

// A batch predicting `idx` itself (any targets do for these comparisons).
Batch Predicting(const at::Tensor& idx) {
  Batch b;
  b.input_ids = idx;
  b.labels = idx;
  return b;
}

}  // namespace

TEST_CASE("lora attaches to the named Linear modules of the blocks, under PEFT's names, and freezes the rest") {
  auto model = MakeTrainableLlama(Llama(TinyLlama(), kUninitialised));
  const auto adapted = model->AttachLora(Lora(kAllLlama));
  CHECK(adapted.size() == 2 * 7);
  CHECK(adapted.front() == "layers.0.self_attn.q_proj");
  std::map<std::string, at::Tensor> by_name;
  for (const auto& p : model->BlockParameters()) by_name[p.name] = p.tensor;
  REQUIRE(by_name.count("layers.1.mlp.down_proj.lora_A.weight") == 1);
  CHECK(by_name.at("layers.1.mlp.down_proj.lora_A.weight").sizes() == at::IntArrayRef({4, 48}));
  CHECK(by_name.at("layers.1.mlp.down_proj.lora_B.weight").sizes() == at::IntArrayRef({32, 4}));
  CHECK(by_name.at("layers.0.self_attn.k_proj.lora_B.weight").sizes() == at::IntArrayRef({16, 4}));  // 2 kv heads x 8
  int trainable = 0;
  for (const auto& [name, t] : by_name) {
    CHECK(t.requires_grad() == IsLoraParameter(name));
    trainable += t.requires_grad() ? 1 : 0;
  }
  CHECK(trainable == 2 * 7 * 2);
  CHECK(by_name.count("lm_head.weight") == 1);  // never adapted

  // PEFT's default targets when none are named: q_proj and v_proj (GPT-2: c_attn).
  auto defaults = MakeTrainableLlama(Llama(TinyLlama(), kUninitialised));
  CHECK(defaults->AttachLora(Lora({})) ==
        std::vector<std::string>{"layers.0.self_attn.q_proj", "layers.0.self_attn.v_proj",
                                 "layers.1.self_attn.q_proj", "layers.1.self_attn.v_proj"});
  auto gpt = MakeTrainableGpt(Gpt(TinyGpt(), kUninitialised));
  CHECK(gpt->AttachLora(Lora({})) == std::vector<std::string>{"h.0.attn.c_attn", "h.1.attn.c_attn"});
}

TEST_CASE("lora: a target naming no module is an error listing the model's Linear modules") {
  auto model = MakeTrainableLlama(Llama(TinyLlama(), kUninitialised));
  CHECK_THROWS_WITH(model->AttachLora(Lora({"q_proj", "qkv_proj"})),
                    Catch::Contains("'qkv_proj' names no module") &&
                        Catch::Contains(
                            "down_proj, gate_proj, k_proj, o_proj, q_proj, up_proj, v_proj"));
  auto gpt = MakeTrainableGpt(Gpt(TinyGpt(), kUninitialised));
  CHECK_THROWS_WITH(gpt->AttachLora(Lora({"q_proj"})),
                    Catch::Contains("its Linear modules are: c_attn, c_fc, c_proj"));
  // The names the config checks before any model is built are these (LoraModuleNames).
  CHECK(LoraModuleNames("gpt2") == std::vector<std::string>{"c_attn", "c_fc", "c_proj"});
  CHECK(LoraModuleNames("llama") ==
        std::vector<std::string>{"down_proj", "gate_proj", "k_proj", "o_proj", "q_proj", "up_proj", "v_proj"});
  auto again = MakeTrainableGpt(Gpt(TinyGpt(), kUninitialised));
  again->AttachLora(Lora({"c_fc"}));
  CHECK_THROWS_WITH(again->AttachLora(Lora({"c_fc"})), Catch::Contains("has an adapter already"));
  CHECK(LoraModuleNames("bert") == std::vector<std::string>{"dense", "key", "query", "value"});
}

TEST_CASE("lora on BERT: HF's module paths, PEFT's defaults and 'dense' as PEFT matches it; a classifier's head trains") {
  BertConfig c;
  c.n_layer = 1;
  c.n_embd = 16;
  c.n_head = 2;
  c.vocab_size = 32;
  auto mlm = MakeTrainableBertMlm(Bert(c, kUninitialised));
  CHECK(mlm->AttachLora(Lora({})) ==
        std::vector<std::string>{"encoder.layer.0.attention.self.query", "encoder.layer.0.attention.self.value"});
  auto dense = MakeTrainableBertMlm(Bert(c, kUninitialised));
  CHECK(dense->AttachLora(Lora({"dense"})) ==
        std::vector<std::string>{"encoder.layer.0.attention.output.dense", "encoder.layer.0.intermediate.dense",
                                 "encoder.layer.0.output.dense", "cls.predictions.transform.dense"});
  std::vector<std::string> trainable;
  for (const auto& p : dense->BlockParameters()) {
    if (p.tensor.requires_grad()) trainable.push_back(p.name);
  }
  CHECK(trainable.size() == 8);
  CHECK(trainable[6] == "cls.predictions.transform.dense.lora_A.weight");
  CHECK_THROWS_WITH(MakeTrainableBertMlm(Bert(c, kUninitialised))->AttachLora(Lora({"q_proj"})),
                    Catch::Contains("its Linear modules are: dense, key, query, value"));

  c.num_labels = 3;
  auto cls = MakeTrainableBertClassifier(Bert(c, kUninitialised));
  cls->AttachLora(Lora({"query", "dense"}));
  std::vector<std::string> whole;
  for (const auto& p : cls->BlockParameters()) {
    if (p.tensor.requires_grad() && !IsLoraParameter(p.name)) whole.push_back(p.name);
    if (p.name.rfind("pooler.dense.lora_", 0) == 0) CHECK(p.tensor.requires_grad());
  }
  CHECK(whole == std::vector<std::string>{"classifier.weight", "classifier.bias"});
}

TEST_CASE("lora init is PEFT's: A Kaiming-uniform within 1/sqrt(in), B zero, decided by seed and name") {
  at::Tensor a = at::empty({16, 400}), b = at::empty({48, 16}), a2 = at::empty({16, 400});
  InitLoraParameter("layers.0.mlp.down_proj.lora_A.weight", a, 7);
  InitLoraParameter("layers.0.mlp.down_proj.lora_B.weight", b, 7);
  InitLoraParameter("layers.0.mlp.down_proj.lora_A.weight", a2, 7);
  CHECK(b.abs().max().item<float>() == 0.0f);
  CHECK(at::equal(a, a2));
  const double bound = 1.0 / 20.0;
  CHECK(a.abs().max().item<double>() <= bound);
  CHECK(a.abs().max().item<double>() > 0.98 * bound);
  CHECK(std::abs(a.var().item<double>() - bound * bound / 3) < 0.05 * bound * bound / 3);  // U(-b, b)
  at::Tensor other = at::empty({16, 400});
  InitLoraParameter("layers.1.mlp.down_proj.lora_A.weight", other, 7);
  CHECK(!at::equal(a, other));
  CHECK_THROWS(InitLoraParameter("layers.0.mlp.down_proj.weight", at::empty({4, 4}), 7));
}

TEST_CASE("lora forward equals the base with merged weights W + alpha/r B A (Llama and GPT-2, rsLoRA)") {
  torch::manual_seed(3);
  for (const bool rslora : {false, true}) {
    for (const bool llama : {true, false}) {
      CAPTURE(rslora, llama);
      auto adapted = llama ? MakeTrainableLlama(Llama(TinyLlama(), kUninitialised))
                           : MakeTrainableGpt(Gpt(TinyGpt(), kUninitialised));
      auto merged = llama ? MakeTrainableLlama(Llama(TinyLlama(), kUninitialised))
                          : MakeTrainableGpt(Gpt(TinyGpt(), kUninitialised));
      LoraConfig l = llama ? Lora(kAllLlama, 4, 8) : Lora({"c_attn", "c_proj", "c_fc"}, 4, 8);
      l.use_rslora = rslora;
      const auto paths = adapted->AttachLora(l);
      InitAll(*adapted, 11);
      InitAll(*merged, 11);
      RandomiseAdapters(*adapted);
      const double scale = rslora ? 8.0 / 2.0 : 8.0 / 4.0;
      CHECK(LoraScale(l) == scale);
      {
        at::NoGradGuard no_grad;
        std::map<std::string, at::Tensor> weights;
        for (const auto& p : adapted->BlockParameters()) weights[p.name] = p.tensor;
        for (const auto& p : merged->BlockParameters()) {
          const std::string module = p.name.substr(0, p.name.rfind('.'));
          if (p.name.size() < 7 || p.name.substr(p.name.size() - 7) != ".weight" ||
              std::find(paths.begin(), paths.end(), module) == paths.end()) {
            continue;
          }
          p.tensor.add_(weights.at(module + ".lora_B.weight").mm(weights.at(module + ".lora_A.weight")) * scale);
        }
      }
      adapted->module().eval();
      merged->module().eval();
      const at::Tensor idx = Tokens(64);
      const Batch batch = Predicting(idx);
      const at::Tensor want = merged->Loss(batch).loss;
      const at::Tensor got = adapted->Loss(batch).loss;
      CHECK(std::abs(got.item<double>() - want.item<double>()) < 1e-5);
      // MergedWeight gives the same merged matrix.
      auto* block = adapted->module().named_modules()[llama ? "layers.0.mlp.up_proj" : "h.0.mlp.c_fc"].get();
      torch::nn::Linear linear(std::dynamic_pointer_cast<torch::nn::LinearImpl>(block->shared_from_this()));
      std::map<std::string, at::Tensor> merged_weights;
      for (const auto& p : merged->BlockParameters()) merged_weights[p.name] = p.tensor;
      CHECK(at::allclose(MergedWeight(linear), merged_weights.at(llama ? "layers.0.mlp.up_proj.weight" : "h.0.mlp.c_fc.weight"),
                         1e-6, 1e-6));
    }
  }
}

TEST_CASE("lora: only the adapters get gradients, the same with activation checkpointing") {
  for (const bool llama : {true, false}) {
    CAPTURE(llama);
    std::vector<std::map<std::string, at::Tensor>> grads;
    for (const bool recompute : {false, true}) {
      LlamaConfig lc = TinyLlama();
      GptConfig gc = TinyGpt();
      lc.activation_checkpointing = gc.activation_checkpointing = recompute;
      auto model = llama ? MakeTrainableLlama(Llama(lc, kUninitialised)) : MakeTrainableGpt(Gpt(gc, kUninitialised));
      model->AttachLora(llama ? Lora(kAllLlama) : Lora({"c_attn", "c_fc"}));
      InitAll(*model, 5);
      torch::manual_seed(1);
      RandomiseAdapters(*model);
      model->module().train();
      const at::Tensor idx = Tokens(64);
      model->Loss(Predicting(idx)).loss.backward();
      std::map<std::string, at::Tensor> g;
      for (const auto& p : model->BlockParameters()) {
        if (!IsLoraParameter(p.name)) {
          CHECK(!p.tensor.grad().defined());
          continue;
        }
        REQUIRE(p.tensor.grad().defined());
        CHECK(p.tensor.grad().abs().max().item<double>() > 0);
        g[p.name] = p.tensor.grad().clone();
      }
      grads.push_back(g);
    }
    REQUIRE(grads[0].size() == grads[1].size());
    for (const auto& [name, g] : grads[0]) {
      CAPTURE(name);
      CHECK(at::allclose(grads[1].at(name), g, 1e-5, 1e-6));
    }
  }
}

TEST_CASE("lora dropout applies to the adapters' input in training only") {
  LoraConfig l = Lora({"q_proj", "v_proj"});
  l.dropout = 0.5;
  auto model = MakeTrainableLlama(Llama(TinyLlama(), kUninitialised));
  model->AttachLora(l);
  InitAll(*model, 2);
  RandomiseAdapters(*model);
  const at::Tensor idx = Tokens(64);
  model->module().eval();
  const double eval1 = model->Loss(Predicting(idx)).loss.item<double>();
  const double eval2 = model->Loss(Predicting(idx)).loss.item<double>();
  CHECK(eval1 == eval2);
  model->module().train();
  torch::manual_seed(4);
  const double train1 = model->Loss(Predicting(idx)).loss.item<double>();
  torch::manual_seed(5);
  const double train2 = model->Loss(Predicting(idx)).loss.item<double>();
  CHECK(train1 != train2);
}

TEST_CASE("PEFT adapter folders: written and read back under this project's names") {
  const std::string root = ps::testing::TempDir() + "/peft_adapter";
  fs::remove_all(root);
  const std::string folder = root + "/adapter";
  LoraConfig l = Lora({"q_proj", "v_proj"}, 4, 16);
  l.use_rslora = true;
  TensorMap weights = {{"layers.0.self_attn.q_proj.lora_A.weight", at::randn({4, 32})},
                       {"layers.0.self_attn.q_proj.lora_B.weight", at::randn({32, 4})},
                       {"layers.0.self_attn.v_proj.lora_A.weight", at::randn({4, 32})},
                       {"layers.0.self_attn.v_proj.lora_B.weight", at::randn({16, 4})}};
  WritePeftAdapter(folder, weights, l, "meta-llama/Llama-3.2-1B", "model.", false);
  const TensorMap raw = LoadSafetensors(folder + "/adapter_model.safetensors");
  CHECK(raw.count("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight") == 1);
  const PeftAdapter back = ReadPeftAdapter(folder, "model.");
  CHECK(back.lora.r == 4);
  CHECK(back.lora.alpha == 16);
  CHECK(back.lora.use_rslora);
  CHECK(back.base_model_name_or_path == "meta-llama/Llama-3.2-1B");
  CHECK(back.lora.target_modules == std::vector<std::string>{"q_proj", "v_proj"});
  REQUIRE(back.weights.size() == 4);
  for (const auto& [name, t] : weights) CHECK(at::equal(back.weights.at(name), t));

  // A GPT-2 adapter read as a Llama one: its keys name another model.
  WritePeftAdapter(root + "/gpt", {{"h.0.attn.c_attn.lora_A.weight", at::randn({4, 8})}}, l, "gpt2",
                   "transformer.", true);
  CHECK_THROWS_WITH(ReadPeftAdapter(root + "/gpt", "model."),
                    Catch::Contains("'base_model.model.transformer.h.0.attn.c_attn.lora_A.weight' is "
                                                       "not a LoRA factor of this model"));
}

TEST_CASE("PEFT adapter folders: what this project does not compute is refused, naming the file") {
  const std::string root = ps::testing::TempDir() + "/peft_bad";
  fs::remove_all(root);
  const std::string folder = root + "/a";
  WritePeftAdapter(folder, {{"layers.0.self_attn.q_proj.lora_A.weight", at::randn({4, 8})}}, Lora({}, 4), "b",
                   "model.", false);
  const auto rewrite = [&](const std::string& json) { std::ofstream(folder + "/adapter_config.json") << json; };
  rewrite(R"({"peft_type": "LORA", "r": 4, "lora_alpha": 8, "use_dora": true})");
  CHECK_THROWS_WITH(ReadPeftAdapter(folder, "model."), Catch::Contains("use_dora is true"));
  rewrite(R"({"peft_type": "IA3", "r": 4, "lora_alpha": 8})");
  CHECK_THROWS_WITH(ReadPeftAdapter(folder, "model."), Catch::Contains("peft_type is not LORA"));
  rewrite(R"({"peft_type": "LORA", "r": 4, "lora_alpha": 8, "rank_pattern": {"q_proj": 8}})");
  CHECK_THROWS_WITH(ReadPeftAdapter(folder, "model."), Catch::Contains("rank_pattern is set"));
  rewrite(R"({"peft_type": "LORA", "r": 8, "lora_alpha": 8})");
  CHECK_THROWS_WITH(ReadPeftAdapter(folder, "model."), Catch::Contains("not rank r = 8"));
  rewrite(R"({"peft_type": "LORA", "r": 4})");
  CHECK_THROWS_WITH(ReadPeftAdapter(folder, "model."),
                    Catch::Contains("adapter_config.json: lora_alpha is missing"));
  CHECK_THROWS_WITH(ReadPeftAdapter(root + "/none", "model."), Catch::Contains("does not exist"));
}

TEST_CASE("MergeLoraInto: W + scale B A in fp32, held in the dtype asked for; nothing merged on a mismatch") {
  const at::Tensor w = at::randn({6, 5}).to(at::kBFloat16);
  const at::Tensor a = at::randn({2, 5});
  const at::Tensor b = at::randn({6, 2});
  const at::Tensor other = at::randn({3, 3});
  TensorMap base = {{"layers.0.mlp.up_proj.weight", w}, {"layers.0.mlp.down_proj.weight", other}};
  const TensorMap adapters = {{"layers.0.mlp.up_proj.lora_A.weight", a},
                              {"layers.0.mlp.up_proj.lora_B.weight", b},
                              {"not.a.factor", at::zeros({1})}};
  MergeLoraInto(base, adapters, 0.5, at::kFloat);
  const at::Tensor expected = w.to(at::kDouble).add(b.to(at::kDouble).mm(a.to(at::kDouble)).mul(0.5));
  CHECK(base.at("layers.0.mlp.up_proj.weight").scalar_type() == at::kFloat);
  CHECK(at::allclose(base.at("layers.0.mlp.up_proj.weight").to(at::kDouble), expected, 0, 1e-5));
  CHECK(at::equal(base.at("layers.0.mlp.down_proj.weight"), other));  // not adapted: the same tensor

  TensorMap bf16 = {{"layers.0.mlp.up_proj.weight", w}};
  MergeLoraInto(bf16, adapters, 0.5, at::kBFloat16);
  CHECK(at::equal(bf16.at("layers.0.mlp.up_proj.weight"), expected.to(at::kFloat).to(at::kBFloat16)));

  TensorMap unchanged = {{"layers.0.mlp.up_proj.weight", w}, {"layers.0.mlp.down_proj.weight", other}};
  TensorMap bad = adapters;
  bad["layers.0.mlp.down_proj.lora_A.weight"] = at::randn({2, 3});
  CHECK_THROWS_WITH(MergeLoraInto(unchanged, bad, 0.5, at::kFloat),
                    Catch::Contains("adapter layers.0.mlp.down_proj has lora_A but no lora_B"));
  bad["layers.0.mlp.down_proj.lora_B.weight"] = at::randn({4, 2});
  CHECK_THROWS_WITH(MergeLoraInto(unchanged, bad, 0.5, at::kFloat), Catch::Contains("does not match the base weight"));
  CHECK(at::equal(unchanged.at("layers.0.mlp.up_proj.weight"), w));  // the up_proj merge was not kept
  CHECK_THROWS_WITH(MergeLoraInto(unchanged, {{"layers.0.mlp.up_proj.lora_B.weight", b}}, 0.5, at::kFloat),
                    Catch::Contains("adapter layers.0.mlp.up_proj has lora_B but no lora_A"));
  bad.erase("layers.0.mlp.down_proj.lora_A.weight");
  bad.erase("layers.0.mlp.down_proj.lora_B.weight");
  bad["layers.9.mlp.up_proj.lora_A.weight"] = a;
  bad["layers.9.mlp.up_proj.lora_B.weight"] = b;
  CHECK_THROWS_WITH(MergeLoraInto(unchanged, bad, 0.5, at::kFloat),
                    Catch::Contains("adapter layers.9.mlp.up_proj adapts no weight of the base model"));
}

}  // namespace ps::models

