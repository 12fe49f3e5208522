// The export of Llama-family models (checkpoint.export_hf, ps_export's ExportCheckpoint):
// each committed HF fixture (Llama 3 scaling, Qwen2 biases, Qwen3 q/k norms, Mistral's
// window) fine-tuned a few chunked steps is written back as its own architecture: a
// config.json that reads back to the run's LlamaConfig with the source's other fields
// kept, weights under HF's names in bf16 (the default) equal to the checkpoint's fp32
// masters rounded once, the source's generation_config.json beside them; fp32 and
// sharded exports hold the masters exactly; a model started from scratch gets the
// architecture its shape implies. (transformers loading the folder back is
// tools/check_hf_export.py's, developer-run.)
#include <filesystem>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "models/hf_folder.h"
#include "models/hf_llama.h"
#include "models/hf_llama_export.h"
#include "models/safetensors.h"
#include "tests/temp_dir.h"
#include "trainer/config/config_loader.h"
#include "trainer/config/llama_keys.h"
#include "trainer/io/checkpoint.h"
#include "trainer/io/hf_io.h"
#include "trainer/train_loop.h"
// Last: c10 headers define a glog-style CHECK that Catch must override.
#include "tests/catch.h"

namespace ps::trainer {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

const std::string kFixtures = "tests/models/testdata/llama_family/";

// A 3-step chunked fine-tune of `family`'s fixture on synthetic tokens, saved and exported.
Config FineTune(const std::string& family, std::vector<std::string> extra = {}) {
  std::vector<std::string> overrides = {"model.init_from=" + kFixtures + family,
                                        "run.output_dir=" + TempDir() + "/export_" + family};
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  return LoadConfigText(
      "model: {type: llama}\n"
      "run: {threads: 1, overwrite: true}\n"
      "data: {format: synthetic, seq_len: 24, synthetic_tokens: 4000}\n"
      "train: {micro_batch_size: 2, global_batch_size: 2, max_steps: 3}\n"
      "optimizer: {lr: 1.0e-2}\n"
      "chunk: {enabled: true, size_elements: 4000}\n"
      "logging: {level: warn}\n"
      "checkpoint: {resume: never, at_end: true, export_hf: true}\n",
      "llama_export.yaml", overrides, ProcessEnv());
}

void CheckSameShape(const models::LlamaConfig& a, const models::LlamaConfig& b) {
  CHECK(a.n_layer == b.n_layer);
  CHECK(a.n_head == b.n_head);
  CHECK(a.kv_heads() == b.kv_heads());
  CHECK(a.n_embd == b.n_embd);
  CHECK(a.head_width() == b.head_width());
  CHECK(a.mlp_width() == b.mlp_width());
  CHECK(a.n_positions == b.n_positions);
  CHECK(a.vocab_size == b.vocab_size);
  CHECK(a.rms_norm_eps == b.rms_norm_eps);
  CHECK(a.rope_theta == b.rope_theta);
  CHECK(a.rope_scaling.type == b.rope_scaling.type);
  CHECK(a.rope_scaling.factor == b.rope_scaling.factor);
  CHECK(a.rope_scaling.original_max_position_embeddings == b.rope_scaling.original_max_position_embeddings);
  CHECK(a.qkv_bias == b.qkv_bias);
  CHECK(a.o_bias == b.o_bias);
  CHECK(a.qk_norm == b.qk_norm);
  CHECK(a.sliding_window == b.sliding_window);
  CHECK(a.tie_word_embeddings == b.tie_word_embeddings);
}

// Every tensor of `folder` is the checkpoint's master in `dtype` (rounded once from fp32).
void CheckWeights(const std::string& folder, const models::TensorMap& masters, const models::LlamaConfig& shape,
                  at::ScalarType dtype) {
  const models::TensorMap back = models::MapHfLlamaWeights(folder, shape);
  REQUIRE(back.size() == masters.size());
  for (const auto& [name, master] : masters) {
    INFO(name);
    CHECK(back.at(name).scalar_type() == dtype);
    CHECK(at::equal(back.at(name).contiguous(), master.to(dtype)));
  }
}

TEST_CASE("llama export: each family's fine-tune is written back as its architecture, in bf16", "[llama][export]") {
  for (const std::string family : {"llama", "qwen2", "qwen3", "mistral"}) {
    INFO(family);
    const Config c = FineTune(family);
    const TrainResult r = Train(c);
    REQUIRE(r.losses.size() == 3);
    const std::string hf = HfExportFolder(c);
    const nlohmann::json source = models::ReadHfJson(kFixtures + family + "/config.json");
    const nlohmann::json out = models::ReadHfJson(hf + "/config.json");
    CHECK(out["architectures"] == source["architectures"]);
    CHECK(out["model_type"] == source["model_type"]);
    CHECK(out["bos_token_id"] == source["bos_token_id"]);  // a field the reader ignores is kept
    CHECK(out["torch_dtype"] == "bfloat16");
    CHECK(out.contains("rope_parameters") == source.contains("rope_parameters"));
    CheckSameShape(models::ReadHfLlamaConfig(hf), LlamaConfigOf(c));
    CHECK(fs::is_regular_file(hf + "/generation_config.json"));
    CHECK(models::ReadHfJson(hf + "/generation_config.json") ==
          models::ReadHfJson(kFixtures + family + "/generation_config.json"));
    const CheckpointContents saved = ReadCheckpoint(ListCheckpoints(c.run.output_dir + "/checkpoints").front(),
                                                    CheckpointParts::kParamsOnly);
    CheckWeights(hf, saved.engine.params, LlamaConfigOf(c), at::kBFloat16);
    // Trained: the export is not the fixture it started from.
    const models::TensorMap start = models::MapHfLlamaWeights(kFixtures + family, LlamaConfigOf(c));
    CHECK_FALSE(at::equal(start.at("norm.weight").to(at::kFloat), saved.engine.params.at("norm.weight")));
  }
}

TEST_CASE("llama export: ps_export in fp32 and in shards holds the masters exactly", "[llama][export]") {
  const Config c = FineTune("qwen3", {"checkpoint.export_hf=false"});
  Train(c);
  const std::string checkpoints = c.run.output_dir + "/checkpoints";
  const CheckpointContents saved = ReadCheckpoint(ListCheckpoints(checkpoints).front(), CheckpointParts::kParamsOnly);
  const std::string out = TempDir() + "/export_qwen3_fp32";
  fs::remove_all(out);
  const HfExportReport report = ExportCheckpoint(checkpoints, out, /*replace=*/false, /*max_shard_bytes=*/20000, "fp32");
  CHECK(std::find(report.files.begin(), report.files.end(), "model.safetensors.index.json") != report.files.end());
  CHECK(models::ReadHfJson(out + "/config.json")["torch_dtype"] == "float32");
  CheckWeights(out, saved.engine.params, LlamaConfigOf(c), at::kFloat);
  CHECK_THROWS_WITH(ExportCheckpoint(checkpoints, out, false, 20000, "fp32"), Catch::Contains("exists already"));
}

TEST_CASE("llama export: a model from scratch is exported as the architecture its shape implies", "[llama][export]") {
  models::LlamaConfig shape;
  CHECK(models::DerivedHfLlamaArchitecture(shape) == "LlamaForCausalLM");
  shape.qkv_bias = true;
  CHECK(models::DerivedHfLlamaArchitecture(shape) == "Qwen2ForCausalLM");
  shape.o_bias = true;
  CHECK(models::DerivedHfLlamaArchitecture(shape) == "LlamaForCausalLM");  // attention_bias: true
  shape.qk_norm = true;
  CHECK(models::DerivedHfLlamaArchitecture(shape) == "Qwen3ForCausalLM");
  models::LlamaConfig mistral;
  mistral.sliding_window = 16;
  CHECK(models::DerivedHfLlamaArchitecture(mistral) == "MistralForCausalLM");

  // A tied tiny model from scratch (no model.init_from, so no source config.json).
  const Config c = LoadConfigText(
      "model: {type: llama, n_layer: 2, n_head: 4, num_key_value_heads: 1, n_embd: 32, intermediate_size: 48,\n"
      "        n_positions: 32, vocab_size: 64, tie_word_embeddings: true, qk_norm: true,\n"
      "        rope_scaling: {type: linear, factor: 2.0}}\n"
      "run: {threads: 1, overwrite: true}\n"
      "data: {format: synthetic, seq_len: 16, synthetic_tokens: 2000}\n"
      "train: {micro_batch_size: 2, global_batch_size: 2, max_steps: 1}\n"
      "logging: {level: warn}\n"
      "checkpoint: {resume: never, at_end: false, export_hf: true, export_dtype: fp32}\n",
      "scratch.yaml", {"run.output_dir=" + TempDir() + "/export_scratch"}, ProcessEnv());
  Train(c);
  const std::string hf = HfExportFolder(c);
  const nlohmann::json out = models::ReadHfJson(hf + "/config.json");
  CHECK(out["architectures"][0] == "Qwen3ForCausalLM");
  CHECK(out["rope_scaling"]["rope_type"] == "linear");
  CHECK_FALSE(fs::exists(hf + "/generation_config.json"));
  CheckSameShape(models::ReadHfLlamaConfig(hf), LlamaConfigOf(c));
  CHECK(models::MapHfLlamaWeights(hf, LlamaConfigOf(c)).count("lm_head.weight") == 0);  // tied
}

}  // namespace
}  // namespace ps::trainer
