// Llama family: logits and loss against HF transformers for Llama (llama3 rope, bf16
// weights), Qwen2 (q/k/v biases, MQA, fp16 weights), Qwen3 (q/k norms, sharded) and
// Mistral (sliding window, linear rope) (fixtures: tools/gen_llama_fixture.py); parameter
// shapes and published counts; activation checkpointing and LossMany against plain
// forward/backward; hooks; the TrainableModel the engines hold and its per-name init;
// HF config.json errors.
#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <filesystem>
#include <fstream>
#include <utility>
#include <vector>

#include "models/hf_folder.h"
#include "models/hf_llama.h"
#include "models/llama.h"
#include "models/safetensors.h"
#include "models/trainable_models.h"
#include "tests/catch.h"
#include "tests/temp_dir.h"

namespace ps::models {
namespace {

namespace fs = std::filesystem;
const std::string kFixtures = "tests/models/testdata/llama_family/";

// A Llama holding an HF folder's weights (converted to fp32 one tensor at a time).
Llama LoadFolder(const std::string& folder, const LlamaConfig& config) {
  Llama model(config, kUninitialised);
  const TensorMap weights = MapHfLlamaWeights(folder, config);
  at::NoGradGuard no_grad;
  for (const auto& p : model->BlockParameters()) p.tensor.copy_(weights.at(p.name).to(at::kFloat));
  model->eval();
  return model;
}

// max |a - b| / max |b|.
double RelativeError(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<double>() / b.abs().max().item<double>();
}

LlamaConfig Tiny() {
  LlamaConfig c;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_kv_head = 2;
  c.n_embd = 32;
  c.head_dim = 16;
  c.intermediate_size = 40;
  c.n_positions = 32;
  c.vocab_size = 50;
  c.qkv_bias = true;
  c.qk_norm = true;
  c.sliding_window = 5;
  c.rope_scaling = {RopeScalingType::kLlama3, 4.0, 1.0, 4.0, 8};
  return c;
}

}  // namespace

TEST_CASE("logits and loss equal HF transformers for each family", "[llama][hf]") {
  const std::string family = GENERATE("llama", "qwen2", "qwen3", "mistral");
  INFO(family);
  const std::string folder = kFixtures + family;
  const LlamaConfig config = ReadHfLlamaConfig(folder);
  Llama model = LoadFolder(folder, config);
  const TensorMap ref = LoadSafetensors(folder + "/reference.safetensors");
  at::NoGradGuard no_grad;
  const at::Tensor logits = model->forward(ref.at("input_ids"));
  const double err = RelativeError(logits, ref.at("logits"));
  INFO("max |logits - HF| / max |HF| = " << err);
  CHECK(err < 1e-5);
  const double loss = model->Loss(ref.at("input_ids"), ref.at("targets")).item<double>();
  CHECK(loss == Approx(ref.at("loss").item<double>()).epsilon(1e-5));
}

TEST_CASE("the fixtures exercise the rope scaling and the sliding window", "[llama][hf]") {
  // The same weights without the feature give other logits: the parity test can fail.
  for (const std::string family : {"llama", "mistral"}) {
    INFO(family);
    const std::string folder = kFixtures + family;
    LlamaConfig config = ReadHfLlamaConfig(folder);
    if (family == "llama") {
      CHECK(config.rope_scaling.type == RopeScalingType::kLlama3);
      CHECK(config.rope_scaling.original_max_position_embeddings == 32);
      config.rope_scaling.type = RopeScalingType::kNone;
    } else {
      CHECK(config.sliding_window == 8);
      CHECK(config.rope_scaling.type == RopeScalingType::kLinear);
      config.sliding_window = 0;
    }
    Llama model = LoadFolder(folder, config);
    const TensorMap ref = LoadSafetensors(folder + "/reference.safetensors");
    at::NoGradGuard no_grad;
    CHECK(RelativeError(model->forward(ref.at("input_ids")), ref.at("logits")) > 1e-3);
  }
}

TEST_CASE("llama3 rope scaling: all three bands equal transformers' for Llama 3.1 8B's settings", "[llama][rope]") {
  // head_dim 128, rope_theta 500000, factor 8, low/high_freq_factor 1/4, original context
  // 8192: wavelengths under 2048 are kept (i <= 28), over 8192 divided by 8 (i >= 35), and
  // the six between interpolated. The fixtures' small shapes skip the middle band.
  LlamaConfig c;
  c.n_embd = 4096;
  c.n_head = 32;
  c.head_dim = 128;
  c.rope_theta = 500000.0;
  c.rope_scaling = {RopeScalingType::kLlama3, 8.0, 1.0, 4.0, 8192};
  const at::Tensor inv_freq = RotaryInverseFrequencies(c);
  REQUIRE(inv_freq.numel() == 64);
  // transformers 5 (ROPE_INIT_FUNCTIONS["llama3"]), fp32, by index.
  const std::vector<std::pair<int64_t, double>> hf = {
      {0, 1.0},                      {1, 0.8146172165870667},       {29, 0.0021665706299245358},
      {30, 0.0013718936825171113},   {31, 0.0008567514596506953},   {32, 0.0005248460220173001},
      {33, 0.0003126936499029398},   {34, 0.0001785077911335975},   {40, 3.428102354519069e-05},
      {50, 4.411534519022098e-06},   {63, 3.068925877869333e-07}};
  for (const auto& [i, want] : hf) {
    INFO("inv_freq[" << i << "] = " << inv_freq[i].item<double>() << ", transformers " << want);
    CHECK(std::abs(inv_freq[i].item<double>() - want) <= 1e-6 * want);
  }
}

TEST_CASE("parameter shapes without building; published parameter counts", "[llama]") {
  for (const bool tied : {true, false}) {
    LlamaConfig c = Tiny();
    c.tie_word_embeddings = tied;
    c.o_bias = !tied;
    at::manual_seed(0);
    Llama model(c);
    const auto params = model->BlockParameters();
    const auto shapes = LlamaParameterShapes(c);
    REQUIRE(params.size() == shapes.size());
    for (size_t i = 0; i < params.size(); ++i) {
      INFO(params[i].name);
      CHECK(params[i].name == shapes[i].name);
      CHECK(params[i].tensor.numel() == shapes[i].numel);
      CHECK(params[i].used_by_blocks == shapes[i].used_by_blocks);
    }
    CHECK(model->CountParameters().total_numel == LlamaParameterCount(c));
  }
  // The counts HF reports for the published checkpoints.
  const std::pair<const char*, int64_t> published[] = {
      {"llama-3.2-1b", 1235814400}, {"llama-3.1-8b", 8030261248}, {"qwen2.5-0.5b", 494032768},
      {"qwen3-0.6b", 596049920},    {"mistral-7b-v0.3", 7248023552}, {"smollm2-135m", 134515008},
      {"tinyllama-1.1b", 1100048384}};
  for (const auto& [name, count] : published) {
    INFO(name);
    const auto preset = FindLlamaPreset(name);
    REQUIRE(preset.has_value());
    CHECK(LlamaParameterCount(preset->config) == count);
  }
  CHECK(LlamaPresets().size() == 15);
}

TEST_CASE("the activation estimate counts one slice of the LM head's logits", "[llama][plan]") {
  const auto preset = FindLlamaPreset("llama-3.2-1b");  // 16 x 2048, 32 + 2 x 8 heads of 64, MLP 8192
  REQUIRE(preset.has_value());
  LlamaConfig c = preset->config;
  const int64_t C = 2048, V = 128256, per_block = 6 * C + (2 * 32 + 2 * 8) * 64 + 4 * 8192;
  const int64_t blocks = (16 * per_block + 3 * C) * 2;  // bf16
  // 4 x 2048 tokens: the default slice is 512 tokens (fp32 logits and a temporary, 8
  // bytes each), not 8192 (8.4 GB).
  CHECK(EstimateLlamaActivationBytes(c, 8192, 2) == 8192 * blocks + 512 * V * 8);
  c.loss_slice_tokens = 1024;
  CHECK(EstimateLlamaActivationBytes(c, 8192, 2) == 8192 * blocks + 1024 * V * 8);
  CHECK(EstimateLlamaActivationBytes(c, 100, 2) == 100 * blocks + 100 * V * 8);
}

TEST_CASE("activation checkpointing and LossMany give plain training's loss and gradients", "[llama][checkpoint]") {
  LlamaConfig c = Tiny();
  c.attention_dropout = 0.1;  // the recompute must replay the dropout masks
  const int k = 2;
  std::vector<at::Tensor> idx;
  for (int m = 0; m < k; ++m) idx.push_back(at::randint(0, 50, {2, 12}, at::kLong));
  auto grads = [](const Llama& model) {
    std::vector<at::Tensor> out;
    for (const auto& p : model->BlockParameters()) out.push_back(p.tensor.grad().clone());
    return out;
  };
  at::manual_seed(3);
  Llama plain(c);
  plain->train();
  std::vector<double> expected;
  for (int m = 0; m < k; ++m) {
    at::manual_seed(100 + m);
    auto loss = plain->Loss(idx[m], idx[m]);
    expected.push_back(loss.item<double>());
    loss.backward();
  }
  c.activation_checkpointing = true;
  at::manual_seed(3);
  Llama recomputed(c);
  recomputed->train();
  for (int m = 0; m < k; ++m) {
    at::manual_seed(100 + m);
    auto loss = recomputed->Loss(idx[m], idx[m]);
    CHECK(loss.item<double>() == expected[m]);
    loss.backward();
  }
  const auto a = grads(plain), b = grads(recomputed);
  for (size_t i = 0; i < a.size(); ++i) CHECK(at::allclose(a[i], b[i], 1e-5, 1e-7));
  // Block-major: without dropout the two schedules compute the same losses.
  c.attention_dropout = 0.0;
  at::manual_seed(3);
  Llama horizontal(c);
  at::manual_seed(3);
  Llama vertical(c);
  horizontal->train();
  vertical->train();
  double sum = 0;
  for (int m = 0; m < k; ++m) {
    auto loss = horizontal->Loss(idx[m], idx[m]);
    sum += loss.item<double>();
    loss.backward();
  }
  const auto losses = vertical->LossMany(idx, idx);
  REQUIRE(losses.size() == k);
  CHECK((losses[0] + losses[1]).item<double>() == Approx(sum).epsilon(1e-6));
  (losses[0] + losses[1]).backward();
  const auto h = grads(horizontal), v = grads(vertical);
  for (size_t i = 0; i < h.size(); ++i) CHECK(at::allclose(h[i], v[i], 1e-5, 1e-7));
}

TEST_CASE("layer hooks see every block in order", "[llama][hooks]") {
  struct Recording : LayerHooks {
    std::vector<int> pre, post;
    void PreForward(int b) override { pre.push_back(b); }
    at::Tensor PostForward(int b, at::Tensor out) override {
      post.push_back(b);
      return out;
    }
  } hooks;
  at::manual_seed(1);
  Llama model(Tiny());
  const at::Tensor idx = at::randint(0, 50, {1, 7}, at::kLong);
  const at::Tensor plain = model->forward(idx);
  CHECK(at::equal(model->forward(idx, &hooks), plain));
  CHECK(hooks.pre == std::vector<int>{0, 1, 2, 3});
  CHECK(hooks.post == std::vector<int>{0, 1, 2, 3});
  CHECK(model->num_blocks() == 4);
  CHECK_THROWS_WITH(model->forward(at::zeros({1, 33}, at::kLong)), Catch::Contains("n_positions"));
}

TEST_CASE("HF config.json: both rope forms; unsupported settings named", "[llama][hf]") {
  const std::string folder = testing::TempDir() + "/llama_config";
  fs::create_directories(folder);
  const nlohmann::json base = ReadHfJson(kFixtures + "llama/config.json");
  auto read = [&](const nlohmann::json& j) {
    WriteHfJsonFile(folder + "/config.json", j);
    return ReadHfLlamaConfig(folder);
  };
  const LlamaConfig v5 = read(base);
  nlohmann::json legacy = base;  // transformers 4: rope_scaling + rope_theta
  legacy.erase("rope_parameters");
  legacy["rope_theta"] = 500000.0;
  legacy["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                            {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 32}};
  const LlamaConfig v4 = read(legacy);
  CHECK(at::equal(RotaryInverseFrequencies(v4), RotaryInverseFrequencies(v5)));
  CHECK(v4.head_dim == 16);
  CHECK(v4.kv_heads() == 2);
  auto refused = [&](const std::function<void(nlohmann::json&)>& edit, const std::string& what) {
    nlohmann::json j = base;
    edit(j);
    INFO(what);
    CHECK_THROWS_WITH(read(j), Catch::Contains("config.json") && Catch::Contains(what));
  };
  refused([](nlohmann::json& j) { j["rope_parameters"]["rope_type"] = "yarn"; }, "rope_parameters.rope_type = \"yarn\"");
  refused([](nlohmann::json& j) { j["num_local_experts"] = 8; }, "num_local_experts = 8");
  refused([](nlohmann::json& j) { j["architectures"] = {"GemmaForCausalLM"}; }, "architectures = [\"GemmaForCausalLM\"]");
  refused([](nlohmann::json& j) { j["hidden_act"] = "gelu"; }, "hidden_act = \"gelu\"");
  refused([](nlohmann::json& j) { j["num_key_value_heads"] = 3; }, "num_key_value_heads");
}

TEST_CASE("HF weights: a missing shard and a misshapen tensor are errors naming the file", "[llama][hf]") {
  const std::string folder = testing::TempDir() + "/qwen3_broken";
  fs::remove_all(folder);
  fs::copy(kFixtures + "qwen3", folder);
  const LlamaConfig config = ReadHfLlamaConfig(folder);
  CHECK(MapHfLlamaWeights(folder, config).size() == LlamaParameterShapes(config).size());
  LlamaConfig wider = config;
  wider.intermediate_size = 64;
  CHECK_THROWS_WITH(MapHfLlamaWeights(folder, wider), Catch::Contains("mlp.gate_proj.weight") &&
                                                          Catch::Contains("has shape"));
  fs::remove(folder + "/model-00002-of-00003.safetensors");
  CHECK_THROWS_WITH(MapHfLlamaWeights(folder, config), Catch::Contains("model-00002-of-00003.safetensors"));
}

}  // namespace ps::models

namespace ps::models {

TEST_CASE("TrainableModel: Llama's loss, LossMany and per-name init as the engines see them", "[llama][init]") {
  LlamaConfig c = Tiny();
  c.activation_checkpointing = true;
  at::manual_seed(5);
  Llama model(c);
  Llama same = model;  // the holder shares the module
  auto trainable = MakeTrainableLlama(model);
  CHECK(trainable->num_blocks() == 4);
  CHECK(trainable->BlockParameters().size() == model->BlockParameters().size());
  Batch batch;
  batch.input_ids = at::randint(0, 50, {2, 9}, at::kLong);
  batch.labels = at::randint(0, 50, {2, 9}, at::kLong);
  trainable->module().eval();
  at::NoGradGuard no_grad;
  const double loss = trainable->Loss(batch).loss.item<double>();
  CHECK(loss == same->Loss(batch.input_ids, batch.labels).item<double>());
  CHECK(trainable->LossMany({batch, batch})[1].loss.item<double>() == Approx(loss).epsilon(1e-6));
  // Init: norms 1, biases 0, weights N(0, init_std); a function of seed and name only.
  for (const auto& p : trainable->BlockParameters()) {
    INFO(p.name);
    at::Tensor a = at::empty(p.tensor.sizes(), at::kFloat), b = at::empty(p.tensor.sizes(), at::kFloat);
    trainable->InitParameter(p.name, a, 42);
    trainable->InitParameter(p.name, b, 42);
    CHECK(at::equal(a, b));
    if (p.name.find("norm.weight") != std::string::npos) {
      CHECK(at::equal(a, at::ones_like(a)));
    } else if (p.name.find(".bias") != std::string::npos) {
      CHECK(at::equal(a, at::zeros_like(a)));
    } else {
      CHECK(a.std().item<double>() == Approx(c.init_std).epsilon(0.2));
      at::Tensor other = at::empty(p.tensor.sizes(), at::kFloat);
      trainable->InitParameter(p.name, other, 43);
      CHECK(!at::equal(a, other));
    }
  }
}

}  // namespace ps::models
