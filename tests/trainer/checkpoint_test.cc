// The checkpoint format on its own: a write/read round trip keeps every tensor and
// scalar exactly; loading names the file (and tensor) of a missing file, a truncated
// one, a wrong checksum, a wrong shape, a parameter the model lacks; the run's input is
// checked before anything is written.
#include <ATen/ATen.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "trainer/checkpoint.h"
#include "trainer/config_loader.h"
#include "trainer/train_loop.h"
#include "tests/temp_dir.h"
// Last: c10 headers define a glog-style CHECK that Catch must override.
#include "tests/catch.h"

namespace ps::trainer {
namespace {

namespace fs = std::filesystem;

using testing::TempDir;

CheckpointContents Sample() {
  CheckpointContents c;
  c.step = 7;
  c.consumed_samples = 56;
  c.tokens_seen = 1792;
  c.engine.params["wte.weight"] = at::randn({16, 4});
  c.engine.params["h.0.mlp.c_fc.weight"] = at::randn({8, 4});
  c.engine.exp_avg["wte.weight"] = at::randn({16, 4});
  c.engine.exp_avg_sq["wte.weight"] = at::rand({16, 4});
  c.engine.adam_steps["wte.weight"] = 7;
  c.engine.extra["loss_scaler"] = "scale=65536 iteration=7";
  c.rng["rng.cpu"] = at::arange(10, at::kByte);
  c.fingerprint = {{"model.n_embd", 4}};
  c.config_yaml = "run: {name: x}\n";
  c.version = "test";
  return c;
}

TEST_CASE("write and read back: every tensor and scalar exactly, files by name", "[checkpoint]") {
  const std::string dir = TempDir() + "/roundtrip";
  const CheckpointContents c = Sample();
  const CheckpointWriteReport report = WriteCheckpoint(dir, c);
  CHECK(report.path == dir + "/step_7");
  CHECK(report.bytes > 0);
  for (const char* f : {"model.safetensors", "optimizer.safetensors", "rng.safetensors", "state.json"}) {
    CHECK(fs::exists(report.path + "/" + f));
  }
  // The optimizer file names its tensors by parameter.
  const auto optimizer = models::LoadSafetensors(report.path + "/optimizer.safetensors");
  CHECK(optimizer.count("optimizer.exp_avg.wte.weight") == 1);
  CHECK(optimizer.count("optimizer.exp_avg_sq.wte.weight") == 1);
  const CheckpointContents r = ReadCheckpoint(report.path);
  CHECK(r.step == 7);
  CHECK(r.consumed_samples == 56);
  CHECK(r.tokens_seen == 1792);
  CHECK(at::equal(r.engine.params.at("wte.weight"), c.engine.params.at("wte.weight")));
  CHECK(at::equal(r.engine.params.at("h.0.mlp.c_fc.weight"), c.engine.params.at("h.0.mlp.c_fc.weight")));
  CHECK(at::equal(r.engine.exp_avg.at("wte.weight"), c.engine.exp_avg.at("wte.weight")));
  CHECK(at::equal(r.engine.exp_avg_sq.at("wte.weight"), c.engine.exp_avg_sq.at("wte.weight")));
  CHECK(at::equal(r.rng.at("rng.cpu"), c.rng.at("rng.cpu")));
  CHECK(r.engine.adam_steps == c.engine.adam_steps);
  CHECK(r.engine.extra == c.engine.extra);
  CHECK(r.fingerprint == c.fingerprint);
  CHECK(r.config_yaml == c.config_yaml);
  std::ifstream latest(dir + "/latest");
  std::string line;
  std::getline(latest, line);
  CHECK(line == "step_7");
  CHECK(ListCheckpoints(dir) == std::vector<std::string>{report.path});
}

TEST_CASE("pruning keeps the newest, never the one just written, and cleans interrupted saves", "[checkpoint][keep]") {
  const std::string dir = TempDir() + "/prune";
  CheckpointContents c = Sample();
  for (int64_t step : {3, 5, 9}) {
    c.step = step;
    WriteCheckpoint(dir, c);
  }
  fs::create_directories(dir + "/.tmp_step_11");                  // a save killed mid-way
  fs::rename(dir + "/step_3", dir + "/.old_step_3");              // killed between the two renames
  const auto deleted = PruneCheckpoints(dir, 1, dir + "/step_5");  // step_5 just written
  CHECK(std::find(deleted.begin(), deleted.end(), dir + "/.tmp_step_11") != deleted.end());
  const auto kept = ListCheckpoints(dir);
  // step_9 (newest) and step_5 (just written) stay; step_3 came back from .old_ and was
  // then pruned as the oldest.
  CHECK(kept == std::vector<std::string>{dir + "/step_9", dir + "/step_5"});
  CHECK_FALSE(fs::exists(dir + "/.old_step_3"));
}

TEST_CASE("loading names the file of a missing, truncated or corrupt part", "[checkpoint][errors]") {
  const std::string dir = TempDir() + "/broken";
  const std::string path = WriteCheckpoint(dir, Sample()).path;
  SECTION("missing state.json: not complete, and not listed") {
    fs::remove(path + "/state.json");
    CHECK_THROWS_WITH(ReadCheckpoint(path), Catch::Contains(path + "/state.json: missing"));
    CHECK(ListCheckpoints(dir).empty());
  }
  SECTION("a missing tensor file") {
    fs::remove(path + "/rng.safetensors");
    CHECK_THROWS_WITH(ReadCheckpoint(path), Catch::Contains(path + "/rng.safetensors: missing"));
  }
  SECTION("a truncated tensor file") {
    fs::resize_file(path + "/model.safetensors", fs::file_size(path + "/model.safetensors") - 4);
    CHECK_THROWS_WITH(ReadCheckpoint(path), Catch::Contains(path + "/model.safetensors") && Catch::Contains("truncated"));
  }
  SECTION("a malformed manifest") {
    std::ofstream(path + "/state.json") << "{\"format\": ";
    CHECK_THROWS_WITH(ReadCheckpoint(path), Catch::Contains(path + "/state.json: not valid JSON"));
  }
  SECTION("not a folder") {
    CHECK_THROWS_WITH(ReadCheckpoint(dir + "/step_99"), Catch::Contains("does not exist"));
  }
}

std::string Corpus() {
  const std::string path = TempDir() + "/ckpt_corpus.txt";
  std::ofstream out(path);
  for (int i = 0; i < 100; ++i) out << "the cat sat on the mat. " << i << " ";
  return path;
}

Config Tiny(const std::string& name, std::vector<std::string> extra = {}) {
  std::vector<std::string> overrides = {"data.train_path=" + Corpus(), "run.output_dir=" + TempDir() + "/" + name,
                                        "run.threads=1"};
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  return LoadConfigText("model: {n_layer: 1, n_head: 2, n_embd: 32, n_positions: 32, vocab_size: 256}\n"
                        "data: {format: text, seq_len: 16}\n"
                        "train: {micro_batch_size: 2, global_batch_size: 2, max_steps: 2}\n"
                        "logging: {level: error}\n",
                        "test.yaml", overrides, ProcessEnv());
}

TEST_CASE("a tensor of the wrong shape or a parameter the model lacks: the file and tensor are named", "[checkpoint][errors]") {
  const Config source = Tiny("shape_src");
  Train(source);
  CheckpointContents c = ReadCheckpoint(source.run.output_dir + "/checkpoints/step_2");
  for (bool chunks : {false, true}) {
    INFO("chunk.enabled " << chunks);
    const std::string on = chunks ? "true" : "false";
    SECTION("wrong shape, chunks " + on) {
      c.engine.params["h.0.mlp.c_fc.weight"] = at::zeros({3, 3});
      const std::string path = WriteCheckpoint(TempDir() + "/shape_bad_" + on, c).path;
      CHECK_THROWS_WITH(Train(Tiny("shape_dst_" + on, {"chunk.enabled=" + on, "checkpoint.resume=" + path})),
                        Catch::Contains(path + "/model.safetensors: parameter 'h.0.mlp.c_fc.weight' has shape [3, 3]"));
    }
    SECTION("unknown parameter, chunks " + on) {
      c.engine.params["h.9.mlp.c_fc.weight"] = at::zeros({3, 3});
      const std::string path = WriteCheckpoint(TempDir() + "/unknown_" + on, c).path;
      CHECK_THROWS_WITH(Train(Tiny("unknown_dst_" + on, {"chunk.enabled=" + on, "checkpoint.resume=" + path})),
                        Catch::Contains("parameter 'h.9.mlp.c_fc.weight' is not in this model"));
    }
  }
}

TEST_CASE("a validation file shorter than one sequence stops the run before it writes anything", "[checkpoint][input]") {
  const std::string short_file = TempDir() + "/short_valid.txt";
  std::ofstream(short_file) << "tiny";
  const Config c = Tiny("short_valid", {"data.valid_path=" + short_file});
  CHECK_THROWS_WITH(Train(c), Catch::Contains(short_file));
  CHECK_FALSE(fs::exists(c.run.output_dir + "/metrics.jsonl"));
  CHECK_FALSE(fs::exists(c.run.output_dir + "/config.resolved.yaml"));
}

}  // namespace
}  // namespace ps::trainer
