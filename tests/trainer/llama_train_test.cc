// model.type: llama through the trainer, end to end: a tiny Llama (grouped-query
// attention, untied head) trained with chunks resident and evicting logs plain
// training's losses; a chunk run killed and resumed logs the same losses bitwise;
// model.init_from of the committed HF fixtures (Llama in bf16, one file; Qwen3 in fp32,
// sharded) starts at HF's loss; an unsupported config.json is a ConfigError naming the
// file and the field; --plan sizes llama-3.1-8b against a stated device and host.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <ATen/ATen.h>

#include "models/safetensors.h"
#include "tests/temp_dir.h"
#include "tests/trainer/killed_run.h"
#include "trainer/config/config_loader.h"
#include "trainer/engine/chunk_setup.h"
#include "trainer/train_loop.h"
// Last: c10 headers define a glog-style CHECK that Catch must override.
#include "tests/catch.h"

namespace ps::trainer {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

const std::string kFixtures = "tests/models/testdata/llama_family/";

std::string WriteCorpus() { return testing::WriteRepeatedText("llama_corpus.txt", 300); }

// 3 blocks of n_embd 64, 4 query heads sharing 2 key/value heads, SwiGLU 96 wide, an
// untied LM head: about 125k parameters, 7 chunks of 20,000 elements.
Config Tiny(const std::string& name, std::vector<std::string> extra = {}) {
  std::vector<std::string> overrides = {"data.train_path=" + WriteCorpus(), "run.output_dir=" + TempDir() + "/" + name,
                                        "run.threads=1"};
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  return LoadConfigText(
      "model: {type: llama, n_layer: 3, n_head: 4, num_key_value_heads: 2, n_embd: 64, intermediate_size: 96,\n"
      "        n_positions: 32, vocab_size: 256, tie_word_embeddings: false, rope_theta: 10000.0}\n"
      "data: {format: text, seq_len: 32, shuffle: true}\n"
      "train: {micro_batch_size: 4, global_batch_size: 4, max_steps: 12, grad_clip: 1.0}\n"
      "optimizer: {lr: 3.0e-3, weight_decay: 0.1}\n"
      "lr_schedule: {type: cosine, warmup_steps: 3, min_lr: 3.0e-4}\n"
      "logging: {level: warn}\n"
      "checkpoint: {at_end: false}\n",
      "llama_test.yaml", overrides, ProcessEnv());
}

std::vector<std::string> Chunks(std::vector<std::string> extra = {}) {
  extra.insert(extra.begin(), {"chunk.enabled=true", "chunk.size_elements=20000"});
  return extra;
}

void CheckSameLosses(const TrainResult& a, const TrainResult& b) {
  REQUIRE(a.losses.size() == b.losses.size());
  for (size_t i = 0; i < a.losses.size(); ++i) {
    INFO("step " << i + 1 << ": " << a.losses[i] << " vs " << b.losses[i]);
    CHECK(std::abs(a.losses[i] - b.losses[i]) <= 1e-6 * std::abs(a.losses[i]));
  }
}

TEST_CASE("llama: chunks resident and evicting train as plain LibTorch", "[llama][chunk][parity]") {
  const TrainResult plain = Train(Tiny("plain", {"checkpoint.resume=never", "run.overwrite=true"}));
  CHECK(plain.losses.back() < 0.7 * plain.losses.front());
  const TrainResult resident = Train(Tiny("resident", Chunks({"checkpoint.resume=never", "run.overwrite=true"})));
  CheckSameLosses(plain, resident);
  CHECK(resident.evictions == 0);
  const TrainResult evicting = Train(Tiny("evicting", Chunks({"checkpoint.resume=never", "run.overwrite=true",
                                                               "chunk.device_budget_bytes=400000"})));
  CheckSameLosses(plain, evicting);
  CHECK(evicting.evictions > 0);
  CHECK(evicting.peak_device_chunk_bytes <= evicting.device_budget_bytes);
}

TEST_CASE("llama: a chunk run killed and resumed logs the same losses bitwise", "[llama][resume]") {
  const std::vector<std::string> extra = Chunks({"chunk.device_budget_bytes=400000"});
  const TrainResult whole = Train(Tiny("resume_whole", extra));
  std::vector<std::string> interrupted = extra;
  interrupted.push_back("checkpoint.every_steps=4");
  const Config c = Tiny("resume_cut", interrupted);
  testing::TrainKilledAfter(c, 6);
  const TrainResult resumed = Train(c);
  REQUIRE(resumed.start_step == 4);
  REQUIRE(resumed.losses.size() == whole.losses.size() - 4);
  for (size_t i = 0; i < resumed.losses.size(); ++i) {
    INFO("step " << 5 + i);
    CHECK(resumed.losses[i] == whole.losses[4 + i]);  // bitwise
  }
  // The rotary base is part of what must match to resume: the same tensors with another
  // rope_theta compute another function.
  std::vector<std::string> other_rope = interrupted;
  other_rope.push_back("model.rope_theta=500000.0");
  CHECK_THROWS_WITH(Train(Tiny("resume_cut", other_rope)), Catch::Contains("model.rope_theta: checkpoint 10000.0"));
}

// Row 0 of a fixture's reference tokens (input_ids then its last target) as a raw
// uint32 file: one sample of seq_len 40.
std::string FirstRowTokens(const models::TensorMap& ref, const std::string& family) {
  const at::Tensor row = at::cat({ref.at("input_ids")[0], ref.at("targets")[0].narrow(0, -1, 1)});
  const at::Tensor tokens = row.to(at::kInt).contiguous();
  const std::string path = TempDir() + "/" + family + "_row0.u32";
  std::ofstream out(path, std::ios::binary);
  out.write(static_cast<const char*>(tokens.data_ptr()), tokens.numel() * 4);
  return path;
}

Config FineTune(const std::string& folder, const std::string& tokens, std::vector<std::string> extra = {}) {
  std::vector<std::string> overrides = {"model.init_from=" + folder, "data.train_path=" + tokens,
                                        "run.output_dir=" + TempDir() + "/ft_" + fs::path(folder).filename().string()};
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  return LoadConfigText(
      "model: {type: llama}\n"
      "run: {threads: 1, overwrite: true}\n"
      "data: {format: raw_u32, seq_len: 40, shuffle: false}\n"
      "train: {micro_batch_size: 1, global_batch_size: 1, max_steps: 1}\n"
      "logging: {level: warn}\n"
      "checkpoint: {resume: never, at_end: false}\n",
      "llama_ft.yaml", overrides, ProcessEnv());
}

TEST_CASE("llama: model.init_from of HF folders (one bf16 file, fp32 shards) starts at HF's loss", "[llama][hf]") {
  for (const std::string family : {"llama", "qwen3"}) {
    INFO(family);
    const std::string folder = kFixtures + family;
    const models::TensorMap ref = models::LoadSafetensors(folder + "/reference.safetensors");
    // HF's loss on row 0, from its golden logits.
    const double hf_loss =
        at::cross_entropy_loss(ref.at("logits")[0].to(at::kDouble), ref.at("targets")[0]).item<double>();
    const std::string tokens = FirstRowTokens(ref, family);
    const Config c = FineTune(folder, tokens);
    CHECK(c.model.n_embd == 32);
    CHECK(c.llama.num_key_value_heads == 2);
    CHECK(c.llama.head_dim == 16);
    for (const auto& mode : {std::vector<std::string>{}, Chunks()}) {
      const TrainResult r = Train(FineTune(folder, tokens, mode));
      REQUIRE(r.losses.size() == 1);
      CHECK(r.losses[0] == Approx(hf_loss).epsilon(1e-5));
    }
  }
  CHECK_THROWS_WITH(FineTune(kFixtures + "qwen3", "unused", {"model.num_key_value_heads=4"}),
                    Catch::Contains("model.num_key_value_heads 4 disagrees with model.init_from") &&
                        Catch::Contains("says 2"));
}

// A copy of the Llama fixture's config.json with `from` replaced by `to`.
std::string EditedFolder(const std::string& name, const std::string& from, const std::string& to) {
  std::ifstream in(kFixtures + "llama/config.json");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t at = text.find(from);
  REQUIRE(at != std::string::npos);
  text.replace(at, from.size(), to);
  const fs::path dir = fs::path(TempDir()) / name;
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << text;
  return dir.string();
}

TEST_CASE("llama: an unsupported config.json is a ConfigError naming the file and the field", "[llama][hf]") {
  const std::string gemma = EditedFolder("gemma", "LlamaForCausalLM", "GemmaForCausalLM");
  CHECK_THROWS_AS(FineTune(gemma, "unused"), ConfigError);
  CHECK_THROWS_WITH(FineTune(gemma, "unused"), Catch::Contains("model.init_from") &&
                                                   Catch::Contains(gemma + "/config.json") &&
                                                   Catch::Contains("architectures") &&
                                                   Catch::Contains("GemmaForCausalLM"));
  // A field of the wrong JSON type is a ConfigError naming the file, not a raw JSON error.
  const std::string null_act = EditedFolder("null_act", "\"silu\"", "null");
  CHECK_THROWS_AS(FineTune(null_act, "unused"), ConfigError);
  CHECK_THROWS_WITH(FineTune(null_act, "unused"), Catch::Contains(null_act + "/config.json"));
  const std::string yarn = EditedFolder("yarn", "\"llama3\"", "\"yarn\"");
  CHECK_THROWS_AS(FineTune(yarn, "unused"), ConfigError);
  CHECK_THROWS_WITH(FineTune(yarn, "unused"),
                    Catch::Contains(yarn + "/config.json") && Catch::Contains("rope_type") && Catch::Contains("yarn"));
}

TEST_CASE("llama: keys and presets", "[llama][config]") {
  const Config c = Tiny("preset", {"model.preset=llama-3.2-1b", "model.n_layer=16", "model.n_head=32",
                                   "model.num_key_value_heads=8", "model.n_embd=2048", "model.intermediate_size=8192",
                                   "model.n_positions=131072", "model.vocab_size=128256",
                                   "model.tie_word_embeddings=true", "model.rope_theta=500000"});
  CHECK(c.llama.head_dim == 64);
  CHECK(c.llama.rope_scaling.type == models::RopeScalingType::kLlama3);
  CHECK_THROWS_WITH(Tiny("clash", {"model.preset=llama-3.2-1b"}),
                    Catch::Contains("disagrees with model.preset 'llama-3.2-1b'"));
  CHECK_THROWS_WITH(Tiny("nopreset", {"model.preset=llama-9b"}), Catch::Contains("known: llama-3.2-1b"));
  CHECK_THROWS_WITH(Tiny("gpt_keys", {"model.type=gpt"}),
                    Catch::Contains("model.num_key_value_heads is a Llama key; set model.type: llama"));
  CHECK_THROWS_WITH(Tiny("kv", {"model.num_key_value_heads=3"}), Catch::Contains("model.num_key_value_heads"));
  // model.head_dim sets the head width: n_head need not divide n_embd.
  CHECK_NOTHROW(Tiny("head_dim", {"model.n_head=3", "model.num_key_value_heads=1", "model.head_dim=16"}));
}

TEST_CASE("llama: --plan for llama-3.1-8b on a 24 GiB device and 64 GiB of host", "[llama][plan]") {
  const int64_t gib = int64_t{1} << 30;
  const Config c = LoadConfigText(
      "model: {type: llama, preset: llama-3.1-8b, activation_checkpointing: true}\n"
      "data: {format: synthetic, seq_len: 2048}\n"
      "train: {micro_batch_size: 1, global_batch_size: 8}\n"
      "precision: {dtype: bf16}\n"
      "chunk: {enabled: true, device_tier: simulated}\n",
      "plan.yaml",
      {"run.output_dir=" + TempDir() + "/plan", "chunk.device_memory_bytes=" + std::to_string(24 * gib),
       "chunk.host_budget_bytes=" + std::to_string(64 * gib)},
      ProcessEnv());
  CHECK(c.model.n_layer == 32);
  CHECK(c.llama.num_key_value_heads == 8);
  bool fits = true;
  const std::string plan = PlanReport(c, at::kCPU, &fits);
  INFO(plan);
  // 8.0e9 parameters: fp32 masters and Adam state alone are 96 GB, beyond 64 GiB of host
  // and 24 GiB of device together with the bf16 copies: the plan says NO and why.
  CHECK(plan.find("fits") != std::string::npos);
  CHECK_FALSE(fits);
  CHECK(plan.find("NO: ") != std::string::npos);
  CHECK(plan.find("largest model") != std::string::npos);
}

}  // namespace
}  // namespace ps::trainer
