// HF GPT-2 folders in and out (model.init_from, checkpoint.export_hf, ps_export's
// ExportCheckpoint), on the tiny fixture tools/gen_hf_fixture.py made with
// `transformers`: the loss at step 0 of a fine-tune equals HF's on the same tokens
// (plain and chunks), the config.json fills the shape, the exported folder holds
// exactly ps_train's parameters in HF's names and layout (sharded too), and bad folders
// are errors naming the file and tensor.
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <nlohmann/json.hpp>

#include <ATen/ATen.h>

#include "models/hf_gpt2.h"
#include "models/safetensors.h"
#include "tests/temp_dir.h"
#include "trainer/config/config_loader.h"
#include "trainer/io/checkpoint.h"
#include "trainer/io/hf_io.h"
#include "trainer/train_loop.h"
// Last: c10 headers define a glog-style CHECK that Catch must override.
#include "tests/catch.h"

namespace ps::trainer {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

const std::string kFixture = "tests/models/testdata/gpt2_tiny_hf";

models::TensorMap Reference() { return models::LoadSafetensors(kFixture + "/reference.safetensors"); }

// The fixture's 33 reference tokens as a raw uint32 token file: two samples of 16.
std::string ReferenceTokens() {
  const std::string path = TempDir() + "/hf_reference_tokens.u32";
  const at::Tensor tokens = Reference().at("tokens").to(at::kInt).contiguous();
  std::ofstream out(path, std::ios::binary);
  out.write(static_cast<const char*>(tokens.data_ptr()), tokens.numel() * 4);
  return path;
}

Config FineTune(const std::string& name, std::vector<std::string> extra = {}) {
  std::vector<std::string> overrides = {"model.init_from=" + kFixture, "data.train_path=" + ReferenceTokens(),
                                        "run.output_dir=" + TempDir() + "/" + name};
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  return LoadConfigText(
      "run: {threads: 1, overwrite: true}\n"
      "data: {format: raw_u32, seq_len: 16, shuffle: false}\n"
      "train: {micro_batch_size: 2, global_batch_size: 2, max_steps: 1, grad_clip: 1.0}\n"
      "optimizer: {lr: 1.0e-3}\n"
      "logging: {level: warn}\n"
      "checkpoint: {resume: never, at_end: false}\n",
      "hf_test.yaml", overrides, ProcessEnv());
}

TEST_CASE("model.init_from takes the shape from config.json and checks keys set against it") {
  const Config c = FineTune("shape");
  CHECK(c.model.n_layer == 2);
  CHECK(c.model.n_head == 4);
  CHECK(c.model.n_embd == 64);
  CHECK(c.model.n_positions == 1024);
  CHECK(c.model.vocab_size == 320);
  CHECK(c.model.tie_word_embeddings);
  CHECK_THROWS_WITH(FineTune("clash", {"model.n_embd=128"}),
                    Catch::Contains("model.n_embd 128 disagrees with model.init_from") && Catch::Contains("says 64"));
  CHECK_THROWS_WITH(FineTune("nofolder", {"model.init_from=/nonexistent/gpt2"}),
                    Catch::Contains("model.init_from") && Catch::Contains("/nonexistent/gpt2"));
}

TEST_CASE("the loss at step 0 of a fine-tune equals the HF model's on the same tokens") {
  const double hf_loss = Reference().at("loss").item<double>();
  for (const std::vector<std::string>& mode :
       {std::vector<std::string>{}, {"chunk.enabled=true", "chunk.size_elements=20000"},
        {"chunk.enabled=true", "chunk.size_elements=20000", "chunk.device_budget_bytes=600000"}}) {
    const TrainResult r = Train(FineTune("step0", mode));
    REQUIRE(r.losses.size() == 1);
    CHECK(r.losses[0] == Approx(hf_loss).epsilon(1e-6));
  }
}

// Every tensor of the exported folder equals the parameter it came from, in HF's layout.
void CheckExportMatches(const std::string& folder, const models::TensorMap& params, const models::GptConfig& shape) {
  const models::TensorMap back = models::MapHfGpt2Weights(folder, shape);
  REQUIRE(back.size() == params.size());
  for (const auto& [name, value] : params) {
    INFO(name);
    CHECK(at::equal(back.at(name).contiguous(), value.to(at::kFloat)));
  }
}

TEST_CASE("checkpoint.export_hf writes an HF folder holding exactly the trained parameters") {
  const Config c = FineTune("export", {"train.max_steps=3", "chunk.enabled=true", "chunk.size_elements=20000",
                                       "checkpoint.at_end=true", "checkpoint.export_hf=true"});
  Train(c);
  const std::string hf = c.run.output_dir + "/hf";
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"}) {
    CHECK(fs::is_regular_file(fs::path(hf) / f));
  }
  // HF names and layout: Conv1D weights [in, out], no lm_head for a tied model.
  const models::TensorMap raw = models::LoadSafetensors(hf + "/model.safetensors");
  CHECK(raw.at("transformer.h.0.attn.c_attn.weight").sizes() == at::IntArrayRef({64, 192}));
  CHECK(raw.at("transformer.h.1.mlp.c_proj.weight").sizes() == at::IntArrayRef({256, 64}));
  CHECK(raw.at("transformer.wte.weight").scalar_type() == at::kFloat);
  CHECK(raw.count("lm_head.weight") == 0);
  CHECK(raw.size() == 2 + 2 * 12 + 2);
  const models::GptConfig shape = models::ReadHfGpt2Config(hf);
  CHECK(shape.n_embd == 64);
  CHECK(shape.vocab_size == 320);
  CHECK(models::ReadHfEosTokenId(hf) == models::ReadHfEosTokenId(kFixture));
  const CheckpointContents saved = ReadCheckpoint(c.run.output_dir + "/checkpoints/step_3", CheckpointParts::kParamsOnly);
  CheckExportMatches(hf, saved.engine.params, c.model);
  // The trained weights differ from the starting ones (the export is not the fixture).
  CHECK_FALSE(at::equal(saved.engine.params.at("h.0.attn.c_attn.weight"),
                        models::MapHfGpt2Weights(kFixture, c.model).at("h.0.attn.c_attn.weight").contiguous()));

  // ps_export's path, sharded: the same tensors, spread over files listed by the index.
  const std::string sharded = c.run.output_dir + "/hf_sharded";
  const HfExportReport report = ExportCheckpoint(c.run.output_dir + "/checkpoints", sharded, false, 100000);
  CHECK(fs::is_regular_file(fs::path(sharded) / "model.safetensors.index.json"));
  CHECK_FALSE(fs::exists(fs::path(sharded) / "model.safetensors"));
  const nlohmann::json index = nlohmann::json::parse(std::ifstream(sharded + "/model.safetensors.index.json"));
  std::set<std::string> shard_files;
  for (const auto& [tensor, file] : index.at("weight_map").items()) shard_files.insert(file.get<std::string>());
  CHECK(shard_files.size() > 2);
  CHECK(shard_files.count("model-00001-of-0000" + std::to_string(shard_files.size()) + ".safetensors") == 1);
  CHECK(index.at("weight_map").size() == 28);
  CHECK(report.bytes > 0);
  CheckExportMatches(sharded, saved.engine.params, c.model);
  CHECK_THROWS_WITH(ExportCheckpoint(c.run.output_dir + "/checkpoints", sharded, false),
                    Catch::Contains("exists already"));
  CHECK_THROWS_WITH(ExportCheckpoint(c.run.output_dir + "/checkpoints", sharded + "/", false),
                    Catch::Contains("exists already"));
  // A trailing slash names the same folder: replaced, nothing left inside it.
  CHECK_NOTHROW(ExportCheckpoint(c.run.output_dir + "/checkpoints", sharded + "/", true, 100000));
  for (const auto& entry : fs::directory_iterator(sharded)) CHECK_FALSE(entry.is_directory());  // no stray folder
  CHECK_NOTHROW(ExportCheckpoint(c.run.output_dir + "/checkpoints", sharded, true));
  CHECK(fs::is_regular_file(fs::path(sharded) / "model.safetensors"));
  CHECK_FALSE(fs::exists(fs::path(sharded) / "model.safetensors.index.json"));
}

TEST_CASE("checkpoint.export_hf with a tokenizer that is not there fails before training") {
  const Config c = FineTune("notok", {"checkpoint.export_hf=true", "data.tokenizer=" + TempDir() + "/no/tokenizer.json"});
  // RunData checks the tokenizer before anything is written, naming the key.
  CHECK_THROWS_WITH(Train(c), Catch::Contains("no/tokenizer.json: cannot open: No such file or directory (data.tokenizer)"));
  CHECK_FALSE(fs::exists(c.run.output_dir + "/metrics.jsonl"));
}

TEST_CASE("an untied head is exported as lm_head.weight and read back") {
  models::GptConfig shape = models::ReadHfGpt2Config(kFixture);
  models::TensorMap params = models::MapHfGpt2Weights(kFixture, shape);
  shape.tie_word_embeddings = false;
  params["lm_head.weight"] = at::randn({320, 64});
  Config c = FineTune("untied_cfg");
  c.model = shape;
  const std::string out = TempDir() + "/untied_hf";
  ExportHfFolder(params, c, out, /*replace=*/true, {});
  CHECK(models::LoadSafetensors(out + "/model.safetensors").count("lm_head.weight") == 1);
  CHECK_FALSE(models::ReadHfGpt2Config(out).tie_word_embeddings);
  CheckExportMatches(out, params, shape);
}

// A copy of the fixture with `edit` applied to its tensors (HF names).
std::string BrokenCopy(const std::string& name, const std::function<void(models::TensorMap&)>& edit) {
  const std::string dir = TempDir() + "/broken_" + name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy_file(kFixture + "/config.json", dir + "/config.json");
  models::TensorMap t = models::LoadSafetensors(kFixture + "/model.safetensors");
  edit(t);
  models::SaveSafetensors(dir + "/model.safetensors", t);
  return dir;
}

TEST_CASE("bad HF folders are errors naming the file and the tensor") {
  const models::GptConfig shape = models::ReadHfGpt2Config(kFixture);
  auto missing = BrokenCopy("missing", [](models::TensorMap& t) { t.erase("transformer.ln_f.bias"); });
  CHECK_THROWS_WITH(models::MapHfGpt2Weights(missing, shape), Catch::Contains("lack 'transformer.ln_f.bias'"));
  auto shaped = BrokenCopy("shape", [](models::TensorMap& t) { t["transformer.h.1.mlp.c_fc.weight"] = at::zeros({256, 64}); });
  CHECK_THROWS_WITH(models::MapHfGpt2Weights(shaped, shape),
                    Catch::Contains("model.safetensors: tensor 'transformer.h.1.mlp.c_fc.weight' has shape [256, 64]") &&
                        Catch::Contains("Conv1D"));
  auto extra = BrokenCopy("extra", [](models::TensorMap& t) { t["transformer.h.2.ln_1.weight"] = at::zeros({64}); });
  CHECK_THROWS_WITH(models::MapHfGpt2Weights(extra, shape), Catch::Contains("unexpected tensor 'transformer.h.2.ln_1.weight'"));
  auto ints = BrokenCopy("ints", [](models::TensorMap& t) { t["transformer.ln_f.bias"] = at::zeros({64}, at::kInt); });
  CHECK_THROWS_WITH(models::MapHfGpt2Weights(ints, shape), Catch::Contains("not floating point"));
  // Buffers of old checkpoints are ignored.
  auto buffers = BrokenCopy("buffers", [](models::TensorMap& t) { t["transformer.h.0.attn.bias"] = at::ones({1, 1, 64, 64}); });
  CHECK_NOTHROW(models::MapHfGpt2Weights(buffers, shape));

  const std::string bert = TempDir() + "/bert_config";
  fs::create_directories(bert);
  std::ofstream(bert + "/config.json") << R"({"model_type": "bert", "hidden_size": 64})";
  CHECK_THROWS_WITH(models::ReadHfGpt2Config(bert), Catch::Contains("model_type 'bert' is not gpt2"));
  std::ofstream(bert + "/config.json") << R"({"model_type": "gpt2", "n_layer": 2, "n_head": 4})";
  CHECK_THROWS_WITH(models::ReadHfGpt2Config(bert), Catch::Contains("config.json: missing key 'n_embd'"));
  std::ofstream(bert + "/config.json") << "{ not json";
  CHECK_THROWS_WITH(models::ReadHfGpt2Config(bert), Catch::Contains("config.json: not valid JSON"));
  CHECK_THROWS_WITH(models::MapHfGpt2Weights(bert, shape), Catch::Contains("neither model.safetensors"));
}

TEST_CASE("a saved synthetic config with stale data paths still loads for an export or a sample") {
  const Config c = ConfigOfCheckpoint(
      "model: {n_layer: 1, n_head: 2, n_embd: 32, n_positions: 32, vocab_size: 256}\n"
      "data: {format: synthetic, seq_len: 16, train_path: /nowhere/train.bin, valid_path: /nowhere/valid.bin}\n",
      "old/step_4");
  CHECK(c.data.train_path.empty());
  CHECK(c.model.n_embd == 32);
}

// A copy of the fixture's folder whose config.json has `key` set to `value`.
std::string FixtureWith(const std::string& name, const std::string& key, const nlohmann::json& value) {
  const std::string dir = TempDir() + "/bad_hf_" + name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  nlohmann::json j = nlohmann::json::parse(std::ifstream(kFixture + "/config.json"));
  j[key] = value;
  std::ofstream(dir + "/config.json") << j.dump();
  fs::copy_file(kFixture + "/model.safetensors", dir + "/model.safetensors");
  return dir;
}

TEST_CASE("model.init_from: config.json values out of range or of the wrong type are config errors naming them") {
  // A head count of 0 once divided by zero (SIGFPE); a billion layers exhausted memory.
  CHECK_THROWS_WITH(FineTune("bad_hf", {"model.init_from=" + FixtureWith("heads", "n_head", 0)}),
                    Catch::Contains("bad_hf_heads': its config.json gives model.n_head 0, which must be in [1, "));
  CHECK_THROWS_WITH(FineTune("bad_hf", {"model.init_from=" + FixtureWith("layers", "n_layer", 1000000000)}),
                    Catch::Contains("config.json: key 'n_layer' is 1000000000, outside [1, 10000]"));
  // (ps_sample --hf reads the same way.)
  CHECK_THROWS_WITH(models::ReadHfGpt2Config(FixtureWith("layers", "n_layer", 1000000000)),
                    Catch::Contains("outside [1, 10000]"));
  // A field of the wrong type: named with its value (was the JSON library's own message).
  CHECK_THROWS_WITH(FineTune("bad_hf", {"model.init_from=" + FixtureWith("tie", "tie_word_embeddings", "yes")}),
                    Catch::Contains("config.json: key 'tie_word_embeddings' is \"yes\", not true or false"));
  CHECK_THROWS_WITH(FineTune("bad_hf", {"model.init_from=" + FixtureWith("eps", "layer_norm_epsilon", "x")}),
                    Catch::Contains("key 'layer_norm_epsilon' is \"x\", not a number"));
  CHECK_THROWS_WITH(FineTune("bad_hf", {"model.init_from=" + FixtureWith("type", "model_type", nullptr)}),
                    Catch::Contains("model_type '' is not gpt2"));
}

TEST_CASE("a text file inferred as data.format text is refused for a model with a tokenizer") {
  const std::string text = TempDir() + "/plain.txt";
  std::ofstream(text) << "some words, read as bytes, would mean nothing to a BPE model\n";
  CHECK_THROWS_WITH(FineTune("text_bytes", {"data.format=auto", "data.train_path=" + text}),
                    Catch::Contains("is text, which data.format text reads as bytes (ids 0-255), but this model has a "
                                    "tokenizer (model.init_from '"));
  CHECK_NOTHROW(FineTune("text_bytes", {"data.format=text", "data.train_path=" + text}));  // asked for: its bytes
}

TEST_CASE("a saved config with the NVMe tier's keys but no tier (accepted by older builds) still loads") {
  const Config c = ConfigOfCheckpoint(
      "model: {n_layer: 1, n_head: 2, n_embd: 32, n_positions: 32, vocab_size: 256}\n"
      "data: {format: synthetic, seq_len: 16}\n"
      "chunk: {enabled: true, nvme_dir: \"\", nvme_ring_slots: 8, nvme_host_budget_bytes: 0}\n",
      "old/step_4");
  CHECK(c.chunk.nvme_ring_slots == 4);
  CHECK(c.chunk.nvme_host_budget_bytes == -1);
  CHECK(c.chunk.enabled);
}

}  // namespace
}  // namespace ps::trainer
