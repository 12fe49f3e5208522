// Config loading: valid files, every class of error with its message and location,
// --set overrides, ${VAR} interpolation, PatrickStar seed keys, presets, the
// resolved-YAML round trip, and the README's config reference against the schema.
#include <sys/stat.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "tests/catch.h"
#include "trainer/config/config_loader.h"
#include "trainer/config/model_shape.h"

namespace ps::trainer {
namespace {

EnvLookup FakeEnv(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

// Most cases here are about other keys: they train on random tokens unless they name
// data themselves (a config without data is an error; see the data cases below).
Config Load(const std::string& yaml, std::vector<std::string> overrides = {},
            std::map<std::string, std::string> env = {}) {
  bool names_data = false;
  for (const char* key : {"format", "train_path", "valid_path"}) {
    names_data |= yaml.find(key) != std::string::npos;
    for (const std::string& text : overrides) names_data |= text.rfind(std::string("data.") + key, 0) == 0;
  }
  if (!names_data) overrides.insert(overrides.begin(), "data.format=synthetic");
  return LoadConfigText(yaml, "test.yaml", overrides, FakeEnv(env));
}

// The ConfigError message for `yaml` (fails the test when it loads).
std::string ErrorOf(const std::string& yaml, const std::vector<std::string>& overrides = {},
                    std::map<std::string, std::string> env = {}) {
  try {
    Load(yaml, overrides, env);
  } catch (const ConfigError& e) {
    return e.what();
  }
  FAIL("config loaded but an error was expected:\n" << yaml);
  return "";
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST_CASE("empty config text gives the struct defaults, once synthetic data is asked for", "[config]") {
  const Config c = LoadConfigText("data: {format: synthetic}\n", "test.yaml", {}, FakeEnv({}));
  Config defaults;
  CHECK(defaults.data.format == data::DataFormat::kAuto);
  defaults.data.format = data::DataFormat::kSynthetic;
  CHECK(ConfigToYaml(c) == ConfigToYaml(defaults));
}

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name;
}

// The ConfigError message of loading the file at `path` (fails the test when it loads).
std::string FileErrorOf(const std::string& path) {
  try {
    LoadConfigFile(path, {"train.max_steps=3"}, FakeEnv({}));
  } catch (const ConfigError& e) {
    return e.what();
  }
  FAIL("config file loaded but an error was expected: " << path);
  return "";
}

TEST_CASE("a config file without keys, or a directory, is an error naming the path", "[config][errors]") {
  const std::string empty = TempPath("empty.yaml");
  std::ofstream(empty, std::ios::trunc).flush();
  CHECK(FileErrorOf(empty) == empty + ": config file is empty (no keys, only whitespace or comments)");
  const std::string comments = TempPath("comments.yaml");
  std::ofstream(comments, std::ios::trunc) << "# model:\n#   n_layer: 2\n\n";
  CHECK(FileErrorOf(comments) == comments + ": config file is empty (no keys, only whitespace or comments)");
  const std::string marker = TempPath("marker.yaml");
  std::ofstream(marker, std::ios::trunc) << "---\n# nothing\n";
  CHECK(FileErrorOf(marker) == marker + ": config file is empty (no keys, only whitespace or comments)");
  CHECK(FileErrorOf("/dev/null") == "/dev/null: config file is empty (no keys, only whitespace or comments)");
  const std::string dir = TempPath("config_dir");
  std::filesystem::create_directories(dir);
  CHECK(FileErrorOf(dir) == dir + ": is a directory, not a config file");
  CHECK(FileErrorOf(TempPath("missing.yaml")) == TempPath("missing.yaml") + ": cannot open config file");
  // One key is enough; an empty mapping says "defaults" on purpose (and then the data is
  // missing, a different error).
  const std::string one = TempPath("one.yaml");
  std::ofstream(one, std::ios::trunc) << "run:\n  seed: 3\n";
  CHECK(LoadConfigFile(one, {"data.format=synthetic"}, FakeEnv({})).run.seed == 3);
  std::ofstream(one, std::ios::trunc) << "{}\n";
  CHECK_NOTHROW(LoadConfigFile(one, {"data.format=synthetic"}, FakeEnv({})));
  CHECK_THROWS_WITH(LoadConfigFile(one, {}, FakeEnv({})), Catch::Contains(one + ": no training data"));
}

// The ConfigError message of loading `yaml` as is (no synthetic data added).
std::string RawErrorOf(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  try {
    LoadConfigText(yaml, "test.yaml", overrides, FakeEnv({}));
  } catch (const ConfigError& e) {
    return e.what();
  }
  FAIL("config loaded but an error was expected:\n" << yaml);
  return "";
}

std::string WriteBytes(const std::string& name, const std::string& bytes) {
  const std::string path = TempPath(name);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  return path;
}

data::DataFormat InferredFormat(const std::string& train, const std::string& valid = "",
                                const std::string& extra = "") {
  std::string yaml = "data:\n  train_path: " + train + "\n";
  if (!valid.empty()) yaml += "  valid_path: " + valid + "\n";
  return LoadConfigText(yaml + extra, "test.yaml", {}, FakeEnv({})).data.format;
}

TEST_CASE("data.format left out is inferred from the files, never defaulted to random tokens", "[config][data]") {
  // No format and no path: an error, not synthetic tokens.
  CHECK(RawErrorOf("model: {n_layer: 2}\n") ==
        "test.yaml: no training data: data.train_path and data.format are not set; set data.train_path "
        "(data.format is inferred from the file), or data.format: synthetic to train on random tokens");
  // Synthetic with a path: the path would be ignored.
  CHECK(RawErrorOf("data:\n  format: synthetic\n  train_path: t.txt\n") ==
        "test.yaml:3:15: data.train_path 't.txt' is set but data.format is synthetic (random tokens; no file is "
        "read): remove the path, or set data.format to the file's format (or leave data.format out to infer it)");
  CHECK(RawErrorOf("data: {format: synthetic}\n", {"data.valid_path=v.bin"}).find(
            "--set data.valid_path=v.bin: data.valid_path 'v.bin' is set but data.format is synthetic") == 0);

  const std::string text = WriteBytes("infer.txt", "Some text, caf\xc3\xa9.\n");
  std::string llmc(1024 + 4, '\0');
  const int32_t header[3] = {20240520, 1, 2};
  std::memcpy(&llmc[0], header, sizeof(header));
  const std::string shard = WriteBytes("infer_shard.bin", llmc);
  WriteBytes("infer_mm.bin", "xx");
  WriteBytes("infer_mm.idx", "yy");
  CHECK(InferredFormat(text) == data::DataFormat::kText);
  CHECK(InferredFormat(shard) == data::DataFormat::kLlmc);
  CHECK(InferredFormat(TempPath("infer_mm")) == data::DataFormat::kMegatron);
  CHECK(InferredFormat(TempPath("infer_mm.idx"), TempPath("infer_mm")) == data::DataFormat::kMegatron);
  const std::string labels = WriteBytes("infer.jsonl", "{\"text\": \"a\", \"label\": 1}\n");
  CHECK(InferredFormat(labels, "", "model: {type: bert, num_labels: 2, vocab_size: 300}\n") ==
        data::DataFormat::kClassification);
  // The resolved config says what was inferred.
  CHECK(ConfigToYaml(LoadConfigText("data: {train_path: " + text + "}\n", "t", {}, FakeEnv({}))).find(
            "  format: text\n") != std::string::npos);

  // What cannot be inferred is an error naming the key and asking for data.format.
  CHECK(RawErrorOf("data:\n  train_path: " + labels + "\n") ==
        "test.yaml:2:15: data.train_path '" + labels + "' holds JSON lines or TSV, not tokens: tokenize it with "
        "ps_prep (docs/data.md), or set data.format: text to train on its bytes (labelled examples are "
        "data.format classification, for model.type bert with model.num_labels)");
  const std::string raw = WriteBytes("infer_raw.bin", std::string("\x01\x00\x02\x00", 4));
  CHECK(RawErrorOf("data:\n  train_path: " + raw + "\n").find(
            "test.yaml:2:15: " + raw + " (data.train_path): cannot infer data.format: not an llm.c shard") == 0);
  const std::string binary = WriteBytes("infer.dat", std::string("\x89PNG\x00\x01", 6));
  CHECK(RawErrorOf("data:\n  train_path: " + binary + "\n").find("cannot infer data.format: binary content") !=
        std::string::npos);
  CHECK(RawErrorOf("data:\n  train_path: " + TempPath("nope.txt") + "\n") ==
        "test.yaml:2:15: " + TempPath("nope.txt") + ": cannot open: No such file or directory (data.train_path)");
  CHECK(RawErrorOf("data:\n  train_path: " + text + "\n  valid_path: " + shard + "\n") ==
        "test.yaml:3:15: data.valid_path '" + shard + "' looks like data.format llmc but data.train_path '" + text +
        "' like text; set data.format");
  CHECK(RawErrorOf("data:\n  valid_path: " + text + "\n").find("test.yaml:2:15: no training data") == 0);
}

TEST_CASE("a FIFO as a data path is refused at load, naming the key, without blocking", "[config][data]") {
  const std::string fifo = TempPath("train.fifo");
  std::filesystem::remove(fifo);
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK(RawErrorOf("data:\n  train_path: " + fifo + "\n") ==
        "test.yaml:2:15: " + fifo + ": is a FIFO (named pipe), not a regular file (data.train_path)");
  // Through a symlink too.
  const std::string link = TempPath("train_link.txt");
  std::filesystem::remove(link);
  std::filesystem::create_symlink(fifo, link);
  CHECK(RawErrorOf("data:\n  train_path: " + link + "\n").find("is a FIFO (named pipe), not a regular file "
                                                                  "(data.train_path)") != std::string::npos);
}

TEST_CASE("output folders: empty run.output_dir, or a file at or above a folder, is an error naming the key",
          "[config][errors]") {
  CHECK(ErrorOf("run:\n  output_dir: ${OUT:-}\n") ==
        "test.yaml:2:15: run.output_dir is empty (an unset ${VAR:-}?); name the run's folder");
  const std::string file = WriteBytes("a_file", "x");
  CHECK(ErrorOf("checkpoint:\n  dir: " + file + "\n") ==
        "test.yaml:2:8: checkpoint.dir '" + file + "': is a file, not a folder");
  CHECK(ErrorOf("checkpoint:\n  dir: " + file + "/ckpt/deeper\n") ==
        "test.yaml:2:8: checkpoint.dir '" + file + "/ckpt/deeper': '" + file +
        "' is a file, not a folder, so nothing can be created under it");
  CHECK(ErrorOf("", {"run.output_dir=" + file + "/run"}) ==
        "--set run.output_dir=" + file + "/run: run.output_dir '" + file + "/run': '" + file +
        "' is a file, not a folder, so nothing can be created under it");
  CHECK(Load("", {"run.output_dir=" + TempPath("not_yet/run"), "checkpoint.dir=" + TempPath("ck")}).run.output_dir ==
        TempPath("not_yet/run"));
}

TEST_CASE("a second YAML document is an error naming its line", "[config][errors]") {
  CHECK(ErrorOf("run:\n  seed: 1\n---\nrun:\n  seed: 2\n") ==
        "test.yaml:3:1: a second YAML document starts here; a config is one document (remove the '---')");
  CHECK(ErrorOf("run:\n  seed: 1\n\n---\n") ==
        "test.yaml:4:1: a second YAML document starts here; a config is one document (remove the '---')");
  CHECK(ErrorOf("run:\n  seed: 1\n...\n# after the end marker\ntrain:\n  max_steps: 2\n") ==
        "test.yaml:5:1: a second YAML document starts here; a config is one document (remove the '---')");
  // A leading '---' opens the one document.
  CHECK(Load("---\nrun:\n  seed: 5\n").run.seed == 5);
}

TEST_CASE("every shipped config loads", "[config]") {
  int loaded = 0;
  for (const auto& entry : std::filesystem::directory_iterator("configs")) {
    if (entry.path().extension() != ".yaml") continue;
    INFO(entry.path().string());
    // The fine-tuning configs read their model's config.json: the tiny fixtures stand in
    // (the Llama one holds 64 positions).
    const bool llama = entry.path().filename().string().find("llama") != std::string::npos;
    CHECK_NOTHROW(LoadConfigFile(entry.path().string(), llama ? std::vector<std::string>{"data.seq_len=64"}
                                                              : std::vector<std::string>{},
                                 FakeEnv({{"PS_MODEL", llama ? "tests/models/testdata/llama_family/llama"
                                                             : "tests/models/testdata/gpt2_tiny_hf"},
                                          {"PS_BERT", "tests/models/testdata/bert_tiny_hf"}})));
    ++loaded;
  }
  CHECK(loaded >= 4);
}

TEST_CASE("values land in the typed structs", "[config]") {
  const Config c = Load(
      "run:\n  seed: 7\n  output_dir: out\n"
      "model:\n  n_layer: 3\n  n_embd: 96\n  n_head: 3\n  dropout: 0.1\n"
      "optimizer:\n  type: adam\n  lr: 1.0e-3\n  betas: [0.8, 0.9]\n"
      "precision:\n  dtype: bf16\n"
      "lr_schedule:\n  type: linear\n  warmup_steps: 5\n");
  CHECK(c.run.seed == 7);
  CHECK(c.run.output_dir == "out");
  CHECK(c.model.n_layer == 3);
  CHECK(c.model.n_embd == 96);
  CHECK(c.model.dropout == Approx(0.1));
  CHECK(c.optimizer.type == optim::OptimizerType::kAdam);
  CHECK(c.optimizer.lr == 1e-3);
  CHECK(c.optimizer.betas == std::vector<double>{0.8, 0.9});
  CHECK(c.precision.dtype == optim::Dtype::kBf16);
  CHECK(c.lr_schedule.type == optim::ScheduleType::kLinear);
  CHECK(c.lr_schedule.warmup_steps == 5);
}

TEST_CASE("unknown key names the path, line and column, and suggests", "[config][errors]") {
  CHECK(ErrorOf("optimizer:\n  lr: 0.1\n  weight_dacay: 0.1\n") ==
        "test.yaml:3:3: unknown key 'optimizer.weight_dacay'; did you mean 'optimizer.weight_decay'?");
  CHECK(ErrorOf("trian:\n  max_steps: 3\n") == "test.yaml:1:1: unknown key 'trian' (see ps_train --config-reference)");
}

TEST_CASE("wrong types name the key, location and expected type", "[config][errors]") {
  CHECK(ErrorOf("train:\n  max_steps: lots\n") ==
        "test.yaml:2:14: train.max_steps: expected an integer, got 'lots' (int)");
  CHECK(ErrorOf("train:\n  max_steps: 2.5\n") ==
        "test.yaml:2:14: train.max_steps: expected an integer, got '2.5' (int)");
  CHECK(ErrorOf("data:\n  shuffle: maybe\n") ==
        "test.yaml:2:12: data.shuffle: expected true or false, got 'maybe' (bool)");
  CHECK(ErrorOf("optimizer:\n  betas: 0.9\n") ==
        "test.yaml:2:10: optimizer.betas: expected a list of 2 numbers, e.g. [0.9, 0.95] (list of 2 floats)");
  CHECK(ErrorOf("precision:\n  dtype: fp8\n") ==
        "test.yaml:2:10: precision.dtype: expected one of fp32|fp16|bf16, got 'fp8' (one of fp32|fp16|bf16)");
  CHECK(ErrorOf("optimizer: 3\n") == "test.yaml:1:12: 'optimizer' is a section and needs a mapping");
  CHECK(ErrorOf("- a\n- b\n") == "test.yaml:1:1: the top level must be a mapping of sections");
}

TEST_CASE("out-of-range values are rejected", "[config][errors]") {
  CHECK(ErrorOf("optimizer:\n  lr: -1\n") == "test.yaml:2:7: optimizer.lr: must be in [0.0, 10.0], got -1.0 (float)");
  CHECK(ErrorOf("train:\n  micro_batch_size: 0\n") ==
        "test.yaml:2:21: train.micro_batch_size: must be in [1, 1000000], got 0 (int)");
  CHECK(ErrorOf("optimizer:\n  betas: [0.9, 1.5]\n") ==
        "test.yaml:2:10: optimizer.betas: must be in [0.0, 1.0), got 1.5 (list of 2 floats)");
}

TEST_CASE("Adam hyper-parameters: betas in [0, 1), eps > 0, lr and weight decay >= 0", "[config][errors]") {
  CHECK(ErrorOf("optimizer:\n  betas: [0.9, 1.0]\n") ==
        "test.yaml:2:10: optimizer.betas: must be in [0.0, 1.0), got 1.0 (list of 2 floats)");
  CHECK(ErrorOf("", {"optimizer.betas=[1.0,0.95]"}) ==
        "--set optimizer.betas=[1.0,0.95]: optimizer.betas: must be in [0.0, 1.0), got 1.0 (list of 2 floats)");
  CHECK(ErrorOf("", {"optimizer.params.betas=[0.9,1]"}).find("must be in [0.0, 1.0), got 1.0") != std::string::npos);
  CHECK(Load("", {"optimizer.betas=[0.0,0.999999]"}).optimizer.betas == std::vector<double>{0.0, 0.999999});
  CHECK(ErrorOf("", {"optimizer.eps=0"}) == "--set optimizer.eps=0: optimizer.eps: must be in (0.0, 1.0], got 0.0 (float)");
  CHECK(ErrorOf("", {"optimizer.lr=-0.1"}).find("optimizer.lr: must be in [0.0, 10.0]") != std::string::npos);
  CHECK(ErrorOf("", {"optimizer.weight_decay=-1"}).find("optimizer.weight_decay: must be in [0.0, 10.0]") !=
        std::string::npos);
}

TEST_CASE("integer keys are bounded instead of truncated or passed on", "[config][errors]") {
  // 2^32 + 1 used to become 1 thread in an int cast; 2^31 reached LibTorch as a negative count.
  CHECK(ErrorOf("", {"run.threads=4294967297"}) ==
        "--set run.threads=4294967297: run.threads: must be in [0, 4096], got 4294967297 (int)");
  CHECK(ErrorOf("", {"run.threads=2147483648"}).find("run.threads: must be in [0, 4096]") != std::string::npos);
  CHECK(ErrorOf("run:\n  threads: -1\n") == "test.yaml:2:12: run.threads: must be in [0, 4096], got -1 (int)");
  CHECK(Load("", {"run.threads=4096"}).run.threads == 4096);
  // Beyond int64 altogether.
  CHECK(ErrorOf("", {"train.max_steps=9223372036854775808"}) ==
        "--set train.max_steps=9223372036854775808: train.max_steps: expected an integer, got "
        "'9223372036854775808' (int)");
  const std::vector<std::pair<std::string, std::string>> too_big = {
      {"model.n_layer=10001", "model.n_layer: must be in [1, 10000], got 10001"},
      {"model.n_head=10001", "model.n_head: must be in [1, 10000], got 10001"},
      {"model.n_embd=3000000000", "model.n_embd: must be in [1, 100000], got 3000000000"},
      {"model.n_positions=10000001", "model.n_positions: must be in [1, 10000000], got 10000001"},
      {"model.vocab_size=10000001", "model.vocab_size: must be in [1, 10000000], got 10000001"},
      {"data.seq_len=10000001", "data.seq_len: must be in [1, 10000000], got 10000001"},
      {"data.synthetic_tokens=1000000000001", "data.synthetic_tokens: must be in [2, 1000000000000]"},
      {"train.micro_batch_size=1000001", "train.micro_batch_size: must be in [1, 1000000], got 1000001"},
      {"train.global_batch_size=1000000001", "train.global_batch_size: must be in [1, 1000000000]"},
      {"train.max_steps=1000000000001", "train.max_steps: must be in [1, 1000000000000]"},
      {"train.eval_every=-1", "train.eval_every: must be in [0, 1000000000000], got -1"},
      {"train.eval_steps=1000000000001", "train.eval_steps: must be in [1, 1000000000000]"},
      {"lr_schedule.warmup_steps=1000000000001", "lr_schedule.warmup_steps: must be in [0, 1000000000000]"},
      {"lr_schedule.decay_steps=-5", "lr_schedule.decay_steps: must be in [0, 1000000000000], got -5"},
      {"precision.initial_scale_power=65", "precision.initial_scale_power: must be in [0, 64], got 65"},
      {"precision.loss_scale_window=1000000000001", "precision.loss_scale_window: must be in [1, 1000000000000]"},
      {"chunk.size_elements=1000000000001", "chunk.size_elements: must be in [1, 1000000000000] or auto"},
      {"chunk.device_budget_bytes=1000000000000000001", "chunk.device_budget_bytes: must be in [0, 1000000000000000000]"},
      {"chunk.host_budget_bytes=-1", "chunk.host_budget_bytes: must be in [0, 1000000000000000000], got -1"},
      {"chunk.device_memory_bytes=1000000000000000001", "chunk.device_memory_bytes: must be in [0, 1000000000000000000]"},
      {"chunk.warmup_steps=0", "chunk.warmup_steps: must be in [1, 1000000000000], got 0"},
      {"chunk.prefetch_depth=100001", "chunk.prefetch_depth: must be in [0, 100000], got 100001"},
      {"chunk.timeline_steps=1000000000001", "chunk.timeline_steps: must be in [0, 1000000000000]"},
      {"distributed.master_port=65536", "distributed.master_port: must be in [0, 65535], got 65536"},
      {"distributed.init_timeout_s=604801", "distributed.init_timeout_s: must be in [1, 604800], got 604801"},
      {"logging.log_every=1000000000001", "logging.log_every: must be in [1, 1000000000000]"},
  };
  for (const auto& [set, message] : too_big) {
    INFO(set);
    CHECK(ErrorOf("", {set}).find("--set " + set + ": " + message) == 0);
  }
}

TEST_CASE("shapes whose activation bytes overflow int64 are errors naming the keys", "[config][errors]") {
  // Every key within its bounds, but one micro-batch's activations would be ~7e23 bytes.
  const std::string e = ErrorOf(
      "model: {n_layer: 10000, n_head: 1, n_embd: 100000, n_positions: 10000000}\n"
      "data: {seq_len: 10000000}\n"
      "train: {micro_batch_size: 1000000, global_batch_size: 1000000}\n");
  CHECK(e == "test.yaml:3:27: train.micro_batch_size 1000000 x data.seq_len 10000000: model.n_layer 10000, "
             "model.n_embd 100000, model.n_positions 10000000, model.vocab_size 256: the activation estimate "
             "(train.micro_batch_size x data.seq_len tokens) overflows int64");
  // The largest shape keys with one short sequence are still counted (and planned).
  CHECK_NOTHROW(Load("model: {n_layer: 10000, n_head: 1, n_embd: 100000, n_positions: 10000000, "
                     "vocab_size: 10000000}\ndata: {seq_len: 16}\ntrain: {micro_batch_size: 1, global_batch_size: 1}\n"));
}

TEST_CASE("byte-level text needs a vocabulary of 256", "[config][errors]") {
  CHECK(ErrorOf("model:\n  vocab_size: 100\ndata:\n  format: text\n  train_path: t.txt\n") ==
        "test.yaml:2:15: model.vocab_size 100 is below 256, the byte values of data.format text");
}

TEST_CASE("duplicate keys are an error naming both lines", "[config][errors]") {
  CHECK(ErrorOf("run:\n  seed: 1\n  seed: 2\n") == "test.yaml:3:3: duplicate key 'run.seed' (first set at line 2)");
}

TEST_CASE("YAML syntax errors carry the location", "[config][errors]") {
  const std::string e = ErrorOf("run:\n  seed: [1, 2\n");
  CHECK(e.rfind("test.yaml:", 0) == 0);
  CHECK(e.find("YAML syntax error") != std::string::npos);
}

TEST_CASE("cross-field checks spell out the problem", "[config][errors]") {
  CHECK(ErrorOf("train:\n  micro_batch_size: 8\n  global_batch_size: 20\n") ==
        "test.yaml:3:22: train.global_batch_size 20 is not divisible by train.micro_batch_size 8 x ranks 1 = 8");
  CHECK(ErrorOf("model:\n  n_embd: 100\n  n_head: 3\n") ==
        "test.yaml:3:11: model.n_embd 100 is not divisible by model.n_head 3");
  CHECK(ErrorOf("data:\n  seq_len: 512\n") == "test.yaml:2:12: data.seq_len 512 exceeds model.n_positions 256");
  CHECK(ErrorOf("data:\n  format: text\n") == "test.yaml:2:11: data.train_path is required for data.format text");
  CHECK(ErrorOf("optimizer:\n  state_dtype: bf16\n") ==
        "test.yaml:2:16: optimizer.state_dtype bf16 needs chunk.enabled: true (the chunk optimizer stores the "
        "moments; the plain LibTorch optimizer keeps them in fp32)");
  CHECK_THAT(ErrorOf("optimizer:\n  state_dtype: fp8\n"), Catch::Contains("optimizer.state_dtype"));
}

TEST_CASE("--set overrides apply after the file, parsed as YAML", "[config][overrides]") {
  const Config c = Load("optimizer:\n  lr: 0.1\n",
                        {"optimizer.lr=3e-4", "optimizer.betas=[0.9,0.95]", "run.name=my run", "data.shuffle=false"});
  CHECK(c.optimizer.lr == 3e-4);
  CHECK(c.optimizer.betas == std::vector<double>{0.9, 0.95});
  CHECK(c.run.name == "my run");
  CHECK_FALSE(c.data.shuffle);
  // Aliases work as overrides too.
  CHECK(Load("", {"optimizer.params.lr=0.5"}).optimizer.lr == 0.5);
}

TEST_CASE("--set errors name the override", "[config][overrides][errors]") {
  CHECK(ErrorOf("", {"optimizer.lrr=1"}) == "--set optimizer.lrr=1: unknown key 'optimizer.lrr'; did you mean 'optimizer.lr'?");
  CHECK(ErrorOf("", {"optimizer.lr"}) == "--set optimizer.lr: expected key=value, e.g. --set optimizer.lr=3e-4");
  CHECK(ErrorOf("", {"optimizer=1"}) == "--set optimizer=1: 'optimizer' is a section, not a key");
  CHECK(ErrorOf("", {"train.max_steps=x"}) == "--set train.max_steps=x: train.max_steps: expected an integer, got 'x' (int)");
}

TEST_CASE("${VAR} interpolation reads the environment", "[config][env]") {
  const std::string yaml = "run:\n  output_dir: ${SCRATCH}/runs/${SLURM_JOB_ID:-local}\n";
  CHECK(Load(yaml, {}, {{"SCRATCH", "/scratch/me"}, {"SLURM_JOB_ID", "42"}}).run.output_dir == "/scratch/me/runs/42");
  CHECK(Load(yaml, {}, {{"SCRATCH", "/s"}}).run.output_dir == "/s/runs/local");
  CHECK(ErrorOf(yaml) ==
        "test.yaml:2:15: run.output_dir: environment variable SCRATCH is not set (write ${SCRATCH:-default} for a default)");
  CHECK(Load("train:\n  max_steps: ${STEPS}\n", {}, {{"STEPS", "12"}}).train.max_steps == 12);
}

TEST_CASE("a default may hold ${...} references; malformed references name file:line", "[config][env]") {
  const std::string nested = "run:\n  output_dir: ${A:-${B}/runs}\n";
  CHECK(Load(nested, {}, {{"B", "/home/me"}}).run.output_dir == "/home/me/runs");
  CHECK(Load(nested, {}, {{"A", "/a"}}).run.output_dir == "/a");  // an unused default is not expanded
  CHECK(Load("run:\n  output_dir: ${A:-${B:-${C:-deep}}/x}-${D:-d}\n").run.output_dir == "deep/x-d");
  CHECK(ErrorOf(nested) ==
        "test.yaml:2:15: run.output_dir: environment variable B is not set (write ${B:-default} for a default)");
  // Unterminated: before, the first '}' closed the outer reference: ${PS_HOME/runs}.
  CHECK(ErrorOf("run:\n  name: x\n  output_dir: ${A:-${B}/runs\n") ==
        "test.yaml:3:15: run.output_dir: unterminated '${' in '${A:-${B}/runs'");
  CHECK(ErrorOf("run:\n  output_dir: ${HOME\n") == "test.yaml:2:15: run.output_dir: unterminated '${' in '${HOME'");
  CHECK(ErrorOf("run:\n  output_dir: ${PS_HOME/runs}\n") ==
        "test.yaml:2:15: run.output_dir: '${PS_HOME/runs' in '${PS_HOME/runs}' is not a variable name (letters, "
        "digits and _): write ${NAME} or ${NAME:-default}");
  CHECK(ErrorOf("", {"run.output_dir=${A:-x"}) == "--set run.output_dir=${A:-x: run.output_dir: unterminated '${' in '${A:-x'");
}

TEST_CASE("--set values are one YAML node: document markers, several documents and null are errors",
          "[config][overrides][errors]") {
  CHECK(ErrorOf("", {"run.name=x\n---\ny"}) ==
        "--set run.name=x\n---\ny: the value holds a YAML document marker ('---'); a --set value is one scalar, "
        "[list] or {map} (quote it to mean the text)");
  CHECK(ErrorOf("", {"run.name=---"}).find("--set run.name=---: the value holds a YAML document marker ('---')") == 0);
  CHECK(ErrorOf("", {"run.name=x\n...\n"}).find("the value holds a YAML document marker ('...')") != std::string::npos);
  CHECK(ErrorOf("", {"run.name=~"}) == "--set run.name=~: the value is YAML null, which no key holds; write key= for an empty string");
  CHECK(ErrorOf("", {"run.name=null"}).find("the value is YAML null") != std::string::npos);
  // Nothing after '=' is the empty string; a marker inside a quoted scalar is text.
  CHECK(Load("run:\n  name: a\n", {"run.name="}).run.name.empty());
  CHECK(Load("", {"run.name='x --- y'"}).run.name == "x --- y");
  CHECK(Load("", {"run.name=---x"}).run.name == "---x");
}

TEST_CASE("PatrickStar's seed config maps onto native keys with DeepSpeed semantics", "[config][seed]") {
  const Config c = LoadConfigFile("configs/patrickstar_seed.yaml", {}, FakeEnv({}));
  CHECK(c.optimizer.type == optim::OptimizerType::kAdam);
  CHECK(c.optimizer.lr == 0.001);
  CHECK(c.optimizer.betas == std::vector<double>{0.9, 0.999});
  CHECK(c.optimizer.eps == 1e-6);
  CHECK(c.optimizer.weight_decay == 0.0);
  CHECK(c.optimizer.hybrid_adam);
  CHECK(c.precision.dtype == optim::Dtype::kFp16);
  CHECK(c.precision.loss_scale == 0.0);
  CHECK(c.precision.initial_scale_power == 8);
  CHECK(c.precision.loss_scale_window == 1000);
  CHECK(c.precision.hysteresis == 2);
  CHECK(c.precision.min_loss_scale == 1.0);
  CHECK(c.chunk.size_elements == 67108864);
  CHECK(c.chunk.cpu_embedding);
  CHECK(c.chunk.placement == chunkmem::PlacementKind::kDynamic);  // with_static_partition: false
  CHECK(c.chunk.device_mem_ratio == 0.9);
  CHECK(c.chunk.margin_use_ratio == 0.8);
}

TEST_CASE("alias rules: fp16.enabled false keeps the dtype; alias plus native key is an error", "[config][seed]") {
  CHECK(Load("fp16:\n  enabled: false\n").precision.dtype == optim::Dtype::kFp32);
  CHECK(Load("gradient_clipping: -1\n").train.grad_clip == 0.0);
  CHECK(Load("gradient_clipping: 0.5\n").train.grad_clip == 0.5);
  CHECK(Load("client:\n  mem_tracer:\n    with_static_partition: true\n").chunk.placement ==
        chunkmem::PlacementKind::kStatic);
  CHECK(Load("fp16:\n  consecutive_hysteresis: true\n").precision.consecutive_hysteresis);
  // Keys PatrickStar needs but ps_train does anyway are accepted (a bool) and change nothing.
  CHECK(ConfigToYaml(Load("release_after_init: false\nclient:\n  mem_tracer:\n    use_async_mem_monitor: true\n")) ==
        ConfigToYaml(Load("")));
  CHECK(ErrorOf("release_after_init: maybe\n").find("test.yaml:1:21: release_after_init") == 0);
  CHECK(ErrorOf("optimizer:\n  lr: 0.1\n  params:\n    lr: 0.2\n") ==
        "test.yaml:4:9: optimizer.params.lr (-> optimizer.lr): 'optimizer.lr' is already set at test.yaml:2:7");
}

TEST_CASE("presets fill the shape keys the config leaves unset", "[config][presets]") {
  const Config c = Load("model:\n  preset: gpt2-124m\n  n_layer: 12\n");
  CHECK(c.model.n_layer == 12);  // explicit and equal to the preset's: accepted
  CHECK(c.model.n_embd == 768);
  CHECK(c.model.n_head == 12);
  CHECK(c.model.vocab_size == 50257);
  CHECK(c.model.n_positions == 1024);
  const std::string e = ErrorOf("model:\n  preset: gpt5\n");
  CHECK(e.rfind("test.yaml:2:11: model.preset: unknown preset 'gpt5'; known: gpt2-124m, ", 0) == 0);
}

TEST_CASE("the attention width is n_head x head_dim where a Llama sets head_dim", "[config][presets]") {
  CHECK(AttentionWidthOf(Load("model:\n  preset: gpt2-124m\n")) == 768);
  // Qwen3-0.6B: 16 heads of 128 = 2048 wide queries on a 1024 residual stream.
  const Config qwen3 = Load("model:\n  type: llama\n  preset: qwen3-0.6b\n");
  CHECK(qwen3.model.n_embd == 1024);
  CHECK(AttentionWidthOf(qwen3) == 2048);
  CHECK(AttentionWidthOf(Load("model:\n  type: llama\n  preset: llama-3.2-1b\n")) == 2048);
}

TEST_CASE("a preset and shape keys that disagree are an error naming both", "[config][presets][errors]") {
  // Used to train the file's 2-layer shape while the config said gpt2-1.5b.
  CHECK(ErrorOf("model:\n  n_layer: 2\n  n_embd: 128\n", {"model.preset=gpt2-1.5b"}) ==
        "test.yaml:2:12: model.n_layer 2 disagrees with model.preset 'gpt2-1.5b' (set at --set "
        "model.preset=gpt2-1.5b), whose n_layer is 48; drop one of the two");
  CHECK(ErrorOf("model:\n  preset: gpt2-124m\n  vocab_size: 256\n") ==
        "test.yaml:3:15: model.vocab_size 256 disagrees with model.preset 'gpt2-124m' (set at test.yaml:2:11), "
        "whose vocab_size is 50257; drop one of the two");
  CHECK(ErrorOf("model:\n  preset: gpt2-124m\n", {"model.n_embd=1024"}) ==
        "--set model.n_embd=1024: model.n_embd 1024 disagrees with model.preset 'gpt2-124m' (set at "
        "test.yaml:2:11), whose n_embd is 768; drop one of the two");
  // All five keys equal to the preset's pass.
  const Config c = Load("model: {preset: gpt2-1.5b, n_layer: 48, n_head: 25, n_embd: 1600, n_positions: 1024, "
                        "vocab_size: 50257}\n");
  CHECK(c.model.n_layer == 48);
}

TEST_CASE("the resolved YAML loads back to the same config", "[config]") {
  const Config c = Load("model:\n  preset: GPT2_1B\noptimizer:\n  lr: 1.0e-4\n  betas: [0.85, 0.975]\n"
                        "run:\n  name: 'a \"quoted\" name'\n",
                        {"train.grad_clip=0.3", "lr_schedule.min_lr=1.0e-5"});
  const std::string yaml = ConfigToYaml(c);
  CHECK(ConfigToYaml(Load(yaml)) == yaml);
  CHECK(yaml.find("  lr: 0.0001\n") != std::string::npos);
}

TEST_CASE("README's config reference is the one generated from the schema", "[config][docs]") {
  const std::string readme = ReadFile("README.md");
  const std::string reference = ConfigReferenceMarkdown();
  INFO("regenerate with: bazel-bin/trainer/ps_train --config-reference (see tools/update_readme_config.sh)");
  CHECK(readme.find(reference) != std::string::npos);
}

TEST_CASE("grad accumulation is derived with the arithmetic in the error", "[config]") {
  TrainConfig t;
  t.micro_batch_size = 4;
  t.global_batch_size = 32;
  CHECK(GradAccumSteps(t, 2) == 4);
  t.global_batch_size = 36;
  CHECK_THROWS_WITH(GradAccumSteps(t, 2),
                    "train.global_batch_size 36 is not divisible by train.micro_batch_size 4 x ranks 2 = 8");
}

}  // namespace
}  // namespace ps::trainer
