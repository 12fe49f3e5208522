// The checkpoint format on its own: a write/read round trip keeps every tensor and
// scalar exactly; loading names the file (and tensor) of a missing file, a truncated
// one, a wrong checksum, a wrong shape, a parameter the model lacks; the run's input is
// checked before anything is written.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "tests/temp_dir.h"
#include "trainer/config/config_loader.h"
#include "trainer/io/checkpoint.h"
#include "trainer/io/checkpointer.h"
#include "trainer/io/file_io.h"
#include "trainer/io/run_folder.h"
#include "trainer/train_loop.h"
// Last: c10 headers define a glog-style CHECK that Catch must override.
#include "tests/catch.h"

namespace ps::trainer {
namespace {

namespace fs = std::filesystem;

using testing::TempDir;

// A checkpoint of run "x" at step 7 whose manifest passes every check: 8 samples a step
// of 32 tokens, both parameters updated at every step, a real CPU generator state.
CheckpointContents Sample() {
  CheckpointContents c;
  c.step = 7;
  c.consumed_samples = 56;
  c.tokens_seen = 1792;
  c.samples = {0, 0, 8};
  c.engine.params["wte.weight"] = at::randn({16, 4});
  c.engine.params["h.0.mlp.c_fc.weight"] = at::randn({8, 4});
  c.engine.exp_avg["wte.weight"] = at::randn({16, 4});
  c.engine.exp_avg_sq["wte.weight"] = at::rand({16, 4});
  c.engine.adam_steps["wte.weight"] = 7;
  c.engine.adam_steps["h.0.mlp.c_fc.weight"] = 7;
  c.engine.extra["loss_scaler"] = "scale=65536 iteration=7";
  c.rng["rng.cpu"] = at::detail::getDefaultCPUGenerator().get_state();
  c.run_name = "x";
  c.fingerprint = {{"model.n_embd", 4}, {"data.seq_len", 32}, {"precision.dtype", "fp32"}};
  c.config_yaml = "run: {name: x}\n";
  c.version = "test";
  return c;
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Applies `edit` to the manifest of checkpoint `path`; with `rehash`, manifest.sha256 is
// rewritten to match, as a careful forger would (so the field checks are what is tested).
void EditManifest(const std::string& path, const std::function<void(nlohmann::json&)>& edit, bool rehash = true) {
  nlohmann::json state = nlohmann::json::parse(ReadText(path + "/state.json"));
  edit(state);
  const std::string text = state.dump(2) + "\n";
  std::ofstream(path + "/state.json", std::ios::binary | std::ios::trunc) << text;
  if (!rehash) return;
  Sha256 hash;
  hash.Update(text.data(), text.size());
  std::ofstream(path + "/manifest.sha256", std::ios::binary | std::ios::trunc) << hash.HexDigest() << "  state.json\n";
}

TEST_CASE("write and read back: every tensor and scalar exactly, files by name", "[checkpoint]") {
  const std::string dir = TempDir() + "/roundtrip";
  const CheckpointContents c = Sample();
  const CheckpointWriteReport report = WriteCheckpoint(dir, c);
  CHECK(report.path == dir + "/step_7");
  CHECK(report.bytes > 0);
  for (const char* f : {"model.safetensors", "optimizer.safetensors", "rng.safetensors", "state.json", "manifest.sha256"}) {
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
  CHECK(r.run_name == "x");
  CHECK(r.samples.global_batch_size == 8);
  CHECK(r.config_yaml == c.config_yaml);
  std::ifstream latest(dir + "/latest");
  std::string line;
  std::getline(latest, line);
  CHECK(line == "step_7");
  CHECK(ListCheckpoints(dir) == std::vector<std::string>{report.path});
}

// Deferred values (an NVMe tier's) at scripted positions: chunk 0 holds "b" then "c",
// chunk 1 holds "a". Reads record the order the writer asks for them.
class ScriptedValues final : public DeferredValues {
 public:
  explicit ScriptedValues(const CheckpointContents& truth) : truth_(truth) {}
  at::Tensor Read(const std::string& map, const std::string& name) override {
    reads.push_back(map + ":" + name);
    const auto& values = map == "params" ? truth_.engine.params : map == "exp_avg" ? truth_.engine.exp_avg
                                                                                   : truth_.engine.exp_avg_sq;
    return values.at(name);
  }
  std::array<int64_t, 3> Position(const std::string& map, const std::string& name) const override {
    const int64_t rank = map == "params" ? 0 : map == "exp_avg" ? 1 : 2;
    if (name == "a") return {1, rank, 0};
    return {0, rank, name == "b" ? 0 : 10};
  }
  void Finish() override { finished = true; }
  std::vector<std::string> reads;
  bool finished = false;

 private:
  const CheckpointContents& truth_;
};

TEST_CASE("deferred values are read in stored order, each chunk once per file, and written exactly", "[checkpoint]") {
  CheckpointContents truth = Sample();
  truth.engine.params.clear();
  truth.engine.exp_avg.clear();
  truth.engine.exp_avg_sq.clear();
  truth.engine.adam_steps.clear();
  for (const char* n : {"a", "b", "c"}) {
    truth.engine.params[n] = at::randn({3, 2});
    truth.engine.exp_avg[n] = at::randn({3, 2});
    truth.engine.exp_avg_sq[n] = at::rand({3, 2});
    truth.engine.adam_steps[n] = 7;
  }
  truth.engine.params["in_memory"] = at::randn({4});  // not deferred: written first
  truth.engine.adam_steps["in_memory"] = 7;
  CheckpointContents c = truth;
  auto values = std::make_shared<ScriptedValues>(truth);
  for (auto* map : {&c.engine.params, &c.engine.exp_avg, &c.engine.exp_avg_sq}) {
    for (auto& [name, t] : *map) {
      if (name != "in_memory") t = at::empty(t.sizes(), at::TensorOptions().dtype(t.scalar_type()).device(at::kMeta));
    }
  }
  c.engine.deferred = values;
  const CheckpointWriteReport report = WriteCheckpoint(TempDir() + "/ordered", c);
  // Name order would read chunk 1 ("a") between the two halves of chunk 0 and its m and
  // v maps apart: 3 chunk changes per map. Stored order: one pass over each chunk.
  CHECK(values->reads == std::vector<std::string>{"params:b", "params:c", "params:a", "exp_avg:b", "exp_avg:c",
                                                  "exp_avg_sq:b", "exp_avg_sq:c", "exp_avg:a", "exp_avg_sq:a"});
  CHECK(values->finished);
  const CheckpointContents r = ReadCheckpoint(report.path);
  for (const auto& [name, t] : truth.engine.params) CHECK(at::equal(r.engine.params.at(name), t));
  for (const auto& [name, t] : truth.engine.exp_avg) CHECK(at::equal(r.engine.exp_avg.at(name), t));
  for (const auto& [name, t] : truth.engine.exp_avg_sq) CHECK(at::equal(r.engine.exp_avg_sq.at(name), t));
}

TEST_CASE("pruning keeps the newest, never the one just written, and cleans interrupted saves", "[checkpoint][keep]") {
  const std::string dir = TempDir() + "/prune";
  CheckpointContents c = Sample();
  for (int64_t step : {3, 5, 9}) {
    c.step = step;
    c.consumed_samples = 8 * step;
    c.tokens_seen = 32 * c.consumed_samples;
    c.engine.adam_steps = {{"wte.weight", step}, {"h.0.mlp.c_fc.weight", step}};
    WriteCheckpoint(dir, c);
  }
  fs::create_directories(dir + "/.tmp_step_11");                  // a save killed mid-way
  fs::rename(dir + "/step_3", dir + "/.old_step_3");              // killed between the two renames
  const auto deleted = PruneCheckpoints(dir, 1, dir + "/step_5", {"x", dir, c.fingerprint});  // step_5 just written
  CHECK(std::find(deleted.begin(), deleted.end(), dir + "/.tmp_step_11") != deleted.end());
  const auto kept = ListCheckpoints(dir);
  // step_9 (newest) and step_5 (just written) stay; step_3 came back from .old_ and was
  // then pruned as the oldest.
  CHECK(kept == std::vector<std::string>{dir + "/step_9", dir + "/step_5"});
  CHECK_FALSE(fs::exists(dir + "/.old_step_3"));
}

TEST_CASE("pruning deletes only this run's verified checkpoints, by the step in their names", "[checkpoint][keep]") {
  const std::string dir = TempDir() + "/prune_owned";
  CheckpointContents c = Sample();
  for (int64_t step : {1, 2, 3, 4, 5}) {
    c.step = step;
    c.consumed_samples = 8 * step;
    c.tokens_seen = 32 * c.consumed_samples;
    c.engine.adam_steps = {{"wte.weight", step}, {"h.0.mlp.c_fc.weight", step}};
    c.run_name = step == 2 ? "other" : "x";  // step_2: another run's, sharing the folder
    WriteCheckpoint(dir, c);
  }
  EditManifest(dir + "/step_1", [](nlohmann::json& s) { s["step"] = 5; });  // a forged manifest: unverified
  EditManifest(dir + "/step_3", [](nlohmann::json& s) { s["tokens_seen"] = -1; }, /*rehash=*/false);
  const auto deleted = PruneCheckpoints(dir, 1, dir + "/step_5", {"x", dir, c.fingerprint});
  CHECK(deleted == std::vector<std::string>{dir + "/step_4"});  // the only older one of run x that verifies
  CHECK(ListCheckpoints(dir) == std::vector<std::string>{dir + "/step_5", dir + "/step_3", dir + "/step_2", dir + "/step_1"});
  // Another fingerprint is another run, too.
  CHECK(PruneCheckpoints(dir, 1, "", {"x", dir, {{"model.n_embd", 8}}}).empty());
  // Checkpoints of run x elsewhere, naming another output folder: another run x.
  CHECK(PruneCheckpoints(dir, 1, "", {"x", TempDir() + "/elsewhere", c.fingerprint}).empty());
}

TEST_CASE("a save never replaces a step_N that is not this run's", "[checkpoint][keep]") {
  const std::string dir = TempDir() + "/replace";
  CheckpointContents mine = Sample();
  mine.run_output_dir = dir;
  WriteCheckpoint(dir, mine);
  const std::string saved = ReadText(dir + "/step_7/state.json");
  CheckpointContents other = Sample();
  other.run_name = "y";
  CHECK_THROWS_WITH(WriteCheckpoint(dir, other), Catch::Contains(dir + "/step_7 exists and is not a checkpoint of this run"));
  CHECK(ReadText(dir + "/step_7/state.json") == saved);
  CHECK_NOTHROW(WriteCheckpoint(dir, mine));  // its own: replaced
  // A folder of that name that is not a checkpoint at all (no state.json) stays too.
  fs::create_directories(dir + "/step_9");
  std::ofstream(dir + "/step_9/notes.txt") << "mine";
  mine.step = 9;
  mine.consumed_samples = 72;
  mine.tokens_seen = 72 * 32;
  mine.engine.adam_steps = {{"wte.weight", 9}, {"h.0.mlp.c_fc.weight", 9}};
  CHECK_THROWS(WriteCheckpoint(dir, mine));
  CHECK(ReadText(dir + "/step_9/notes.txt") == "mine");
  CHECK_FALSE(fs::exists(dir + "/.tmp_step_9"));
}

TEST_CASE("the manifest is verified: its hash, its name, and every field against the others", "[checkpoint][manifest]") {
  const std::string dir = TempDir() + "/manifest";
  fs::remove_all(dir);
  const std::string path = WriteCheckpoint(dir, Sample()).path;
  const auto fails = [&](const std::function<void(nlohmann::json&)>& edit, const std::string& why) {
    const std::string saved = ReadText(path + "/state.json"), hash = ReadText(path + "/manifest.sha256");
    EditManifest(path, edit);
    CHECK_THROWS_AS(ReadCheckpoint(path), CheckpointError);
    CHECK_THROWS_WITH(ReadCheckpoint(path), Catch::Contains(path + "/state.json") && Catch::Contains(why));
    CHECK_THROWS_WITH(ReadCheckpoint(path, CheckpointParts::kManifestOnly), Catch::Contains(why));
    std::ofstream(path + "/state.json", std::ios::binary | std::ios::trunc) << saved;
    std::ofstream(path + "/manifest.sha256", std::ios::binary | std::ios::trunc) << hash;
  };
  SECTION("an edit without a new hash") {
    EditManifest(path, [](nlohmann::json& s) { s["consumed_samples"] = 48; }, /*rehash=*/false);
    CHECK_THROWS_WITH(ReadCheckpoint(path), Catch::Contains("does not match " + path + "/manifest.sha256"));
  }
  SECTION("no hash file") {
    fs::remove(path + "/manifest.sha256");
    CHECK_THROWS_WITH(ReadCheckpoint(path), Catch::Contains("manifest.sha256: missing"));
  }
  SECTION("fields out of range or disagreeing, even re-hashed") {
    fails([](nlohmann::json& s) { s["step"] = -1; }, "field 'step' is -1");
    fails([](nlohmann::json& s) { s["step"] = 3; }, "field 'step' is 3 but the folder is named step_7");
    fails([](nlohmann::json& s) { s["step"] = "7"; }, "field 'step' is not an integer");
    fails([](nlohmann::json& s) { s["consumed_samples"] = -8; }, "field 'consumed_samples' is -8");
    fails([](nlohmann::json& s) { s["consumed_samples"] = 4; }, "field 'consumed_samples' is 4, but the schedule");
    fails([](nlohmann::json& s) { s["tokens_seen"] = -1; }, "field 'tokens_seen' is -1");
    fails([](nlohmann::json& s) { s["tokens_seen"] = 1000; }, "field 'tokens_seen' is 1000, but it must be 56 samples x 32");
    fails([](nlohmann::json& s) { s["min_scale_skips"] = 9; }, "field 'min_scale_skips' is 9");
    fails([](nlohmann::json& s) { s.erase("adam_steps"); }, "adam_steps");
    fails([](nlohmann::json& s) { s["adam_steps"]["wte.weight"] = 1; }, "adam_steps disagree");
    fails([](nlohmann::json& s) { s["adam_steps"] = {{"wte.weight", 1}, {"h.0.mlp.c_fc.weight", 1}}; },
          "adam_steps are 1, but every step of a fp32 run updates: step is 7");
    fails([](nlohmann::json& s) { s["adam_steps"]["wte.weight"] = 8; }, "adam_steps of 'wte.weight' is 8");
    fails([](nlohmann::json& s) { s["samples"]["start_step"] = 9; }, "field 'start_step' is 9");
    fails([](nlohmann::json& s) { s["run_name"] = 3; }, "field 'run_name'");
    fails([](nlohmann::json& s) { s["files"]["../x"] = s["files"]["rng.safetensors"]; }, "is not a tensor file");
  }
  SECTION("update counts name exactly the parameters") {
    const auto edited = [&](const std::function<void(nlohmann::json&)>& edit) {
      EditManifest(path, edit);
      return path;
    };
    edited([](nlohmann::json& s) { s["adam_steps"].erase("h.0.mlp.c_fc.weight"); });
    CHECK_THROWS_WITH(ReadCheckpoint(path), Catch::Contains("adam_steps has no entry for parameter 'h.0.mlp.c_fc.weight'"));
    edited([](nlohmann::json& s) { s["adam_steps"]["h.0.mlp.c_fc.weight"] = 7; s["adam_steps"]["h.9.attn.weight"] = 7; });
    CHECK_THROWS_WITH(ReadCheckpoint(path), Catch::Contains("adam_steps names 'h.9.attn.weight', not a parameter"));
  }
  SECTION("a folder's name is its step: copies under other step names are not read") {
    fs::copy(path, dir + "/step_07", fs::copy_options::recursive);
    fs::copy(path, dir + "/step_999999999999999999", fs::copy_options::recursive);
    CHECK(ListCheckpoints(dir) == std::vector<std::string>{dir + "/step_999999999999999999", path});
    CHECK(StrayCheckpointFolders(dir) == std::vector<std::string>{dir + "/step_07"});
    CHECK_THROWS_WITH(ReadCheckpoint(dir + "/step_07"), Catch::Contains("but the folder is named step_07"));
    CHECK_THROWS_WITH(ReadCheckpoint(dir + "/step_999999999999999999"),
                      Catch::Contains("field 'step' is 7 but the folder is named step_999999999999999999"));
    for (const char* other : {"best", "step_7.unusable", "step_7_final"}) {  // other names: read as named explicitly
      fs::copy(path, dir + "/" + other, fs::copy_options::recursive);
      CHECK(ReadCheckpoint(dir + "/" + other).step == 7);
    }
  }
}

TEST_CASE("a random generator state is a checkpoint error, not an internal assert", "[checkpoint][manifest]") {
  CheckpointContents c = Sample();
  c.rng["rng.cpu"] = at::randint(0, 256, {c.rng["rng.cpu"].numel()}, at::kByte);
  const std::string path = WriteCheckpoint(TempDir() + "/bad_rng", c).path;
  CHECK_THROWS_WITH(ReadCheckpoint(path), Catch::Contains(path + "/rng.safetensors: 'rng.cpu' is not a valid CPU generator"));
  c.rng["rng.cpu"] = at::arange(10, at::kByte);  // the wrong size
  CHECK_THROWS_AS(ReadCheckpoint(WriteCheckpoint(TempDir() + "/short_rng", c).path), CheckpointError);
  CHECK(ReadCheckpoint(path, CheckpointParts::kParamsOnly).step == 7);  // exports do not need it
}

TEST_CASE("loading names the file of a missing, truncated or corrupt part", "[checkpoint][errors]") {
  const std::string dir = TempDir() + "/broken";
  fs::remove_all(dir);  // each section breaks it anew (a save would not replace a broken one)
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
  SECTION("a file the file system fails to read (EIO): an I/O error, not a bad checkpoint") {
    // /proc/self/mem opens, and a read at offset 0 (unmapped) fails with EIO.
    fs::remove(path + "/model.safetensors");
    fs::create_symlink("/proc/self/mem", path + "/model.safetensors");
    CHECK_THROWS_AS(ReadCheckpoint(path), FileIoError);
    // Resuming: the error stops the search; the checkpoint is not counted unusable (so
    // never renamed aside) and no older one is taken in its place.
    WriteCheckpoint(dir, [] {
      CheckpointContents older = Sample();
      older.step = 6;
      older.consumed_samples = 48;
      older.tokens_seen = 1536;
      older.samples = {0, 0, 8};
      for (auto& [name, steps] : older.engine.adam_steps) steps = 6;
      return older;
    }());
    REQUIRE(ListCheckpoints(dir).size() == 2);
    CheckpointConfig config;
    std::string found;
    std::vector<std::string> unusable;
    CHECK_THROWS_WITH(FindResumeCheckpoint(config, dir, {"x", "", {}}, &found, &unusable),
                      Catch::Contains(path) && Catch::Contains("not set aside") &&
                          Catch::Contains("Input/output error"));
    CHECK(unusable.empty());
    CHECK(found.empty());
  }
}

TEST_CASE("folders named as later checkpoints but without a state.json stop the run at start", "[checkpoint][errors]") {
  const std::string dir = TempDir() + "/incomplete";
  fs::remove_all(dir);
  fs::create_directories(dir + "/step_3");
  fs::create_directories(dir + "/step_9");
  std::ofstream(dir + "/step_9/model.safetensors") << "part of a copy";
  CHECK_THROWS_WITH(RefuseIncompleteCheckpointFolders(dir, 5),
                    Catch::Contains(dir + "/step_9") && !Catch::Contains(dir + "/step_3") &&
                        Catch::Contains("state.json"));
  CHECK_THROWS_WITH(RefuseIncompleteCheckpointFolders(dir, 0), Catch::Contains(dir + "/step_3"));
  CHECK_NOTHROW(RefuseIncompleteCheckpointFolders(dir, 9));  // no later step: nothing this run would save over
  WriteCheckpoint(dir + "/w", Sample());  // a complete one is not refused
  CHECK_NOTHROW(RefuseIncompleteCheckpointFolders(dir + "/w", 0));
  CHECK_NOTHROW(RefuseIncompleteCheckpointFolders(dir + "/absent", 0));
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
      c.engine.adam_steps["h.9.mlp.c_fc.weight"] = c.step;  // a well-formed manifest: the model decides
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
