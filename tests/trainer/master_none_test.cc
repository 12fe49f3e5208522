// optimizer.master_weights none (docs/optim.md, "Weights without an fp32 master") in
// training, on a tiny GPT through the chunk runtime in bf16, evicting on the simulated
// device: the run trains (losses within a few percent of the same run with an fp32
// master, falling), its checkpoint's weights are bf16 values (no master kept) and its
// memory has no master and bf16 gradient chunks; the stochastic rounding is seeded (the
// same run twice: the same losses; the kernels' independence of their thread split is
// cpu_adam_test's); a run killed and resumed from a checkpoint goes on with the same
// losses bitwise, with the optimizer state on the host and on the device (the fused
// update widens the bf16 weights and rounds them back); the settings it cannot serve are refused naming both
// keys.
#include <ATen/ATen.h>

#include <cmath>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include "tests/temp_dir.h"
#include "tests/trainer/killed_run.h"
#include "trainer/config/config_loader.h"
#include "trainer/io/checkpoint.h"
#include "trainer/train_loop.h"

#include "tests/catch.h"

namespace ps::trainer {
namespace {

using testing::TempDir;

// 3 blocks of n_embd 64 in chunks of 8,000 elements, bf16, evicting under a device
// budget, dropout on, 16 steps.
Config Tiny(const std::string& name, std::vector<std::string> extra) {
  std::vector<std::string> overrides = {"data.train_path=" + testing::WriteRepeatedText("master_none_corpus.txt", 300),
                                        "run.output_dir=" + TempDir() + "/" + name, "run.threads=2",
                                        "chunk.enabled=true", "chunk.size_elements=8000",
                                        "chunk.device_budget_bytes=450000", "precision.dtype=bf16"};
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  return LoadConfigText(
      "model: {n_layer: 3, n_head: 2, n_embd: 64, n_positions: 32, vocab_size: 256, dropout: 0.1}\n"
      "data: {format: text, seq_len: 32, shuffle: true}\n"
      "train: {micro_batch_size: 4, global_batch_size: 8, max_steps: 16, grad_clip: 1.0}\n"
      "optimizer: {lr: 3.0e-3, weight_decay: 0.1}\n"
      "logging: {level: warn, log_every: 1}\n"
      "checkpoint: {at_end: true}\n",
      "test.yaml", overrides, ProcessEnv());
}

const std::vector<std::string> kNone = {"optimizer.master_weights=none", "optimizer.state_dtype=int8"};

double Mean(const std::vector<double>& v, size_t from) {
  double sum = 0;
  for (size_t i = from; i < v.size(); ++i) sum += v[i];
  return sum / static_cast<double>(v.size() - from);
}

// The run of `extra` with a checkpoint every 5 steps, killed after step 7 and resumed:
// steps 6 to 16 give `whole`'s losses bitwise.
void CheckKilledAndResumed(const std::string& name, std::vector<std::string> extra, const TrainResult& whole) {
  extra.push_back("checkpoint.every_steps=5");
  const Config c = Tiny(name, extra);
  testing::TrainKilledAfter(c, 7);
  const TrainResult resumed = Train(c);
  REQUIRE(resumed.start_step == 5);
  REQUIRE(resumed.losses.size() == 11);
  for (size_t i = 0; i < resumed.losses.size(); ++i) {
    INFO(name << ": step " << 6 + i);
    CHECK(resumed.losses[i] == whole.losses[5 + i]);
  }
}

}  // namespace

TEST_CASE("master_weights none trains like the run with an fp32 master; no master is kept", "[master_none][train]") {
  const Config none = Tiny("none", kNone);
  const TrainResult a = Train(none);
  const TrainResult b = Train(Tiny("fp32_master", {"optimizer.state_dtype=int8"}));
  REQUIRE(a.losses.size() == 16);
  REQUIRE(b.losses.size() == 16);
  CHECK(a.losses.front() == b.losses.front());  // the same weights, data and dropout at step 1
  for (double l : a.losses) CHECK(std::isfinite(l));
  CHECK(Mean(a.losses, 12) < a.losses.front() - 0.5);  // it learns
  CHECK(Mean(a.losses, 12) == Approx(Mean(b.losses, 12)).epsilon(0.03));
  // Chunk bytes: compute 2 + grads 2 + int8 m, v about 2.03 per element, against 2 + 4 + 4 + 2.03.
  CHECK(static_cast<double>(a.model_data_bytes) < 0.6 * static_cast<double>(b.model_data_bytes));
  // The checkpoint's weights are the bf16 weights themselves.
  const CheckpointContents c = ReadCheckpoint(ListCheckpoints(none.run.output_dir + "/checkpoints").back());
  REQUIRE(!c.engine.params.empty());
  for (const auto& [name, t] : c.engine.params) {
    INFO(name);
    CHECK(t.scalar_type() == at::kBFloat16);
  }
}

TEST_CASE("master_weights none: the same run twice, the same losses bitwise (the rounding is seeded)",
          "[master_none][train]") {
  const TrainResult a = Train(Tiny("twice_a", kNone));
  const TrainResult b = Train(Tiny("twice_b", kNone));
  REQUIRE(a.losses.size() == b.losses.size());
  for (size_t i = 0; i < a.losses.size(); ++i) {
    INFO("step " << i + 1);
    CHECK(a.losses[i] == b.losses[i]);
  }
}

TEST_CASE("master_weights none: killed and resumed from a checkpoint, the same losses bitwise",
          "[master_none][train][resume]") {
  CheckKilledAndResumed("resume_cut", kNone, Train(Tiny("resume_whole", kNone)));
}

TEST_CASE("master_weights none, optimizer state on the device: the fused update with stochastic rounding",
          "[master_none][train][device]") {
  std::vector<std::string> device = kNone;  // room for every chunk's state on the (simulated) device
  device.push_back("chunk.device_budget_bytes=8000000");
  const TrainResult a = Train(Tiny("device_none", device));
  const TrainResult b =
      Train(Tiny("device_master", {"optimizer.state_dtype=int8", "chunk.device_budget_bytes=8000000"}));
  REQUIRE(a.losses.size() == 16);
  CHECK(a.adam_device_chunks > 0);
  CHECK(a.adam_host_chunks == 0);
  CHECK(Mean(a.losses, 12) < a.losses.front() - 0.5);
  CHECK(Mean(a.losses, 12) == Approx(Mean(b.losses, 12)).epsilon(0.03));
  CheckKilledAndResumed("device_cut", device, a);  // on this path too
}

TEST_CASE("master_weights none with speculation: updates ahead kept, or rolled back and redone, give the same run",
          "[master_none][train][speculation]") {
  // No clipping: the updates ahead stand; clipping every step (no backoff): each is
  // rolled back from the slot's backup of the bf16 weights and m, v, then redone.
  for (const auto& [clip, key] : {std::pair<const char*, const char*>{"1000", "adam_speculated"},
                                  {"0.01", "adam_rolled_back"}}) {
    INFO("grad_clip " << clip);
    std::vector<std::string> host = kNone;  // every chunk host-updated: each may speculate
    host.push_back("optimizer.hybrid_adam=false");
    host.push_back(std::string("train.grad_clip=") + clip);
    std::vector<std::string> ahead = host;
    ahead.push_back("optimizer.speculation_slots=4");
    ahead.push_back("optimizer.speculation_backoff_steps=0");
    const Config c = Tiny(std::string("speculated_") + clip, ahead);
    const TrainResult a = Train(Tiny(std::string("not_speculated_") + clip, host));
    const TrainResult b = Train(c);
    REQUIRE(a.losses.size() == b.losses.size());
    for (size_t i = 0; i < a.losses.size(); ++i) {
      INFO("step " << i + 1);
      CHECK(b.losses[i] == a.losses[i]);
    }
    std::ifstream metrics(c.run.output_dir + "/metrics.jsonl");
    int64_t chunks = 0;  // kept, or rolled back: the path this clip takes was taken
    const std::string field = std::string("\"") + key + "\": ";
    for (std::string line; std::getline(metrics, line);) {
      const size_t at = line.find(field);
      if (at != std::string::npos) chunks += std::stoll(line.substr(at + field.size()));
    }
    CHECK(chunks > 0);
  }
}

TEST_CASE("checkpoints load across master_weights modes: the first step after resuming sees the same weights",
          "[master_none][train][resume]") {
  // A run's step-10 checkpoint resumed in the other mode: step 11's forward runs on the
  // same bf16 weights (a master's rounded copy, or the weights themselves, whose fp32
  // master starts as their exact value) with the same data and dropout: the same loss.
  const std::vector<std::string> master = {"optimizer.state_dtype=int8", "checkpoint.every_steps=5",
                                           "checkpoint.keep=5"};
  std::vector<std::string> none = kNone;
  none.push_back("checkpoint.every_steps=5");
  none.push_back("checkpoint.keep=5");
  for (const auto& [from, to, name] :
       {std::tuple{none, master, "none_to_master"}, std::tuple{master, none, "master_to_none"}}) {
    INFO(name);
    const Config source = Tiny(std::string(name) + "_source", from);
    const TrainResult original = Train(source);
    std::vector<std::string> resume = to;
    resume.push_back("checkpoint.resume=" + source.run.output_dir + "/checkpoints/step_10");
    const TrainResult resumed = Train(Tiny(std::string(name) + "_resumed", resume));
    REQUIRE(resumed.start_step == 10);
    REQUIRE(!resumed.losses.empty());
    CHECK(resumed.losses.front() == original.losses[10]);
    for (double l : resumed.losses) CHECK(std::isfinite(l));
  }
}

TEST_CASE("master_weights none: settings it cannot serve are refused naming both keys", "[master_none][config]") {
  auto error = [](std::vector<std::string> extra) {
    extra.push_back("optimizer.master_weights=none");
    try {
      Tiny("refused", extra);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK_THAT(error({"precision.dtype=fp32"}),
             Catch::Contains("optimizer.master_weights none and precision.dtype fp32"));
  CHECK_THAT(error({"precision.dtype=fp16"}), Catch::Contains("precision.dtype fp16"));
  CHECK_THAT(error({"chunk.enabled=false"}), Catch::Contains("and chunk.enabled: false"));
  CHECK_THAT(error({"lora.enabled=true"}), Catch::Contains("and lora.enabled: true cannot be combined"));
  CHECK(error({}).empty());
}

}  // namespace ps::trainer
