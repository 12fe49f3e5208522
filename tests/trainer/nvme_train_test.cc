// The NVMe tier in training (chunk.nvme_dir; docs/chunkmem.md, "NVMe tier") on the
// simulated device and this machine's disk: with every host-updated chunk's optimizer
// state on the tier (chunk.nvme_host_budget_bytes 0), a run gives the losses, gradient
// norms and checkpoint tensors of the same run without it, bitwise (fp32 compute: m and
// v on the tier; bf16 evicting with some state on the device: master, m and v; int8
// moments; fp16 with overflow skips; the HF export); a run killed and resumed from a
// checkpoint goes on with the same losses (ZeRO over 2 ranks: zero_test.sh); a disk that
// cannot hold the tier stops the resumed run with an error naming it, and the checkpoint
// before stays valid and resumes bitwise; unusable directories and speculation are
// refused before training, naming the key (and by --plan), and a refused run deletes
// nothing of an earlier one under run.overwrite.
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "tests/file_size_limit.h"
#include "tests/temp_dir.h"
#include "tests/trainer/killed_run.h"
#include "trainer/config/config_loader.h"
#include "trainer/engine/chunk_setup.h"
#include "trainer/io/checkpoint.h"
#include "trainer/train_loop.h"

#include "tests/catch.h"

namespace ps::trainer {
namespace {

using testing::TempDir;

std::string NvmeDir(const std::string& name) {
  const std::string dir = TempDir() + "/nvme_" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// 3 blocks of n_embd 64 in chunks of 20,000 elements, dropout on, 12 steps.
Config Tiny(const std::string& name, std::vector<std::string> extra) {
  const std::string dir = TempDir() + "/" + name;
  std::vector<std::string> overrides = {"data.train_path=" + testing::WriteRepeatedText("nvme_corpus.txt", 300),
                                        "run.output_dir=" + dir, "run.threads=1", "chunk.enabled=true",
                                        "chunk.size_elements=20000"};
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  return LoadConfigText(
      "model: {n_layer: 3, n_head: 2, n_embd: 64, n_positions: 32, vocab_size: 256, dropout: 0.1}\n"
      "data: {format: text, seq_len: 32, shuffle: true}\n"
      "train: {micro_batch_size: 4, global_batch_size: 4, max_steps: 12, grad_clip: 1.0}\n"
      "optimizer: {lr: 3.0e-3, weight_decay: 0.1}\n"
      "logging: {level: warn, log_every: 1}\n"
      "checkpoint: {at_end: true}\n",
      "test.yaml", overrides, ProcessEnv());
}

// The values of `key` in every step line of a run's metrics.jsonl, as text.
std::vector<std::string> MetricValues(const Config& c, const std::string& key) {
  std::ifstream in(c.run.output_dir + "/metrics.jsonl");
  std::vector<std::string> values;
  for (std::string line; std::getline(in, line);) {
    const size_t at = line.find("\"" + key + "\": ");
    if (at == std::string::npos || line.find("\"step\"") == std::string::npos) continue;
    const size_t from = at + key.size() + 4;
    values.push_back(line.substr(from, line.find_first_of(",}", from) - from));
  }
  return values;
}

void CheckSameTensors(const models::TensorMap& a, const models::TensorMap& b, const std::string& what) {
  REQUIRE(a.size() == b.size());
  for (const auto& [name, t] : a) {
    INFO(what << " " << name);
    REQUIRE(b.count(name) == 1);
    CHECK(at::equal(t, b.at(name)));  // bitwise: the same bytes back from the file
  }
}

// The exported HF folder's weights, as bytes.
std::string ExportedWeights(const Config& c) {
  std::ifstream in(c.run.output_dir + "/hf/model.safetensors", std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// `extra` run without the tier and with every host-updated chunk's state on it.
void CheckSameRun(const std::string& name, const std::vector<std::string>& extra) {
  const Config ram = Tiny(name + "_ram", extra);
  std::vector<std::string> with = extra;
  with.push_back("chunk.nvme_dir=" + NvmeDir(name));
  with.push_back("chunk.nvme_host_budget_bytes=0");
  const Config nvme = Tiny(name + "_nvme", with);
  const TrainResult a = Train(ram);
  const TrainResult b = Train(nvme);
  REQUIRE(a.losses.size() == 12);
  REQUIRE(b.losses.size() == 12);
  for (size_t i = 0; i < a.losses.size(); ++i) {
    INFO(name << ": step " << i + 1);
    CHECK(b.losses[i] == a.losses[i]);
  }
  CHECK(MetricValues(nvme, "grad_norm") == MetricValues(ram, "grad_norm"));
  // The tier was used: every step read and wrote state (cumulative, growing).
  const std::vector<std::string> written = MetricValues(nvme, "nvme_written_bytes");
  REQUIRE(written.size() == 12);
  CHECK(std::stoll(written.front()) > 0);
  CHECK(std::stoll(written.back()) > std::stoll(written.front()));
  CHECK(std::stoll(MetricValues(nvme, "nvme_read_bytes").back()) > 0);
  CHECK(MetricValues(ram, "nvme_written_bytes").empty());
  // Every checkpoint kept, the newest (step 12) first.
  const std::vector<std::string> saved_ram = ListCheckpoints(ram.run.output_dir + "/checkpoints");
  const std::vector<std::string> saved_nvme = ListCheckpoints(nvme.run.output_dir + "/checkpoints");
  REQUIRE(!saved_ram.empty());
  REQUIRE(saved_nvme.size() == saved_ram.size());
  CHECK(saved_ram.front().find("step_12") != std::string::npos);
  for (size_t k = 0; k < saved_ram.size(); ++k) {
    INFO(saved_ram[k]);
    const CheckpointContents ca = ReadCheckpoint(saved_ram[k]);
    const CheckpointContents cb = ReadCheckpoint(saved_nvme[k]);
    CheckSameTensors(ca.engine.params, cb.engine.params, "params");
    CheckSameTensors(ca.engine.exp_avg, cb.engine.exp_avg, "exp_avg");
    CheckSameTensors(ca.engine.exp_avg_sq, cb.engine.exp_avg_sq, "exp_avg_sq");
  }
  if (ram.checkpoint.export_hf) {
    const std::string weights = ExportedWeights(ram);
    CHECK(weights.size() > 1000);
    CHECK(ExportedWeights(nvme) == weights);
  }
}

}  // namespace

TEST_CASE("NVMe tier, fp32 compute, every chunk's m and v in the file: the same run bitwise", "[nvme][train]") {
  CheckSameRun("fp32", {"optimizer.hybrid_adam=false"});
}

TEST_CASE("NVMe tier, bf16 evicting, some state on the device, master m v in the file: the same run bitwise",
          "[nvme][train][bf16]") {
  CheckSameRun("bf16", {"precision.dtype=bf16", "chunk.size_elements=8000", "chunk.device_budget_bytes=450000"});
  const std::vector<std::string> device = MetricValues(Tiny("bf16_nvme", {}), "adam_device_chunks");  // that run's file
  REQUIRE(!device.empty());
  CHECK(std::stoll(device.back()) > 0);  // some chunks were updated on the device, the others through the tier
  CHECK(std::stoll(MetricValues(Tiny("bf16_nvme", {}), "evictions").back()) > 0);
}

TEST_CASE("NVMe tier, fp16 with overflows: the skipped steps restore the compute chunks from the tier's masters",
          "[nvme][train][fp16]") {
  CheckSameRun("fp16", {"precision.dtype=fp16", "precision.initial_scale_power=24", "optimizer.hybrid_adam=false"});
  const std::vector<std::string> skipped = MetricValues(Tiny("fp16_nvme", {}), "skipped_steps");
  REQUIRE(!skipped.empty());
  CHECK(std::stoll(skipped.back()) > 0);
}

TEST_CASE("NVMe tier, int8 moments: the same run bitwise", "[nvme][train][int8]") {
  CheckSameRun("int8", {"precision.dtype=bf16", "optimizer.state_dtype=int8", "optimizer.hybrid_adam=false"});
}

TEST_CASE("NVMe tier, bf16 moments: the same run bitwise", "[nvme][train][bf16_state]") {
  CheckSameRun("bf16_state", {"precision.dtype=bf16", "optimizer.state_dtype=bf16", "optimizer.hybrid_adam=false"});
}

TEST_CASE("NVMe tier, bf16 weights without an fp32 master: m and v in the file, the same run bitwise",
          "[nvme][train][master_none]") {
  CheckSameRun("none", {"precision.dtype=bf16", "optimizer.master_weights=none", "optimizer.state_dtype=int8",
                        "optimizer.hybrid_adam=false", "checkpoint.export_hf=true"});
}

TEST_CASE("NVMe tier: the HF export reads the masters through the tier, bitwise", "[nvme][train][export]") {
  // With a checkpoint at the end the export reads it; without, the engine's masters.
  CheckSameRun("export", {"precision.dtype=bf16", "optimizer.hybrid_adam=false", "checkpoint.export_hf=true"});
  CheckSameRun("export_live", {"precision.dtype=bf16", "optimizer.hybrid_adam=false", "checkpoint.export_hf=true",
                               "checkpoint.at_end=false", "checkpoint.every_steps=6"});
}

// `extra` run whole, and run again with a checkpoint every 4 steps, killed after step 6
// (the run to resume: `cut`).
struct CutRun {
  TrainResult whole;
  Config cut;
};
CutRun WholeAndCut(const std::string& name, const std::vector<std::string>& extra) {
  std::vector<std::string> cut = extra;
  cut.push_back("checkpoint.every_steps=4");
  CutRun r{Train(Tiny(name + "_whole", extra)), Tiny(name + "_cut", cut)};
  testing::TrainKilledAfter(r.cut, 6);
  return r;
}

// A run resumed from step 4's checkpoint goes on with the whole run's losses, bitwise.
void CheckResumedAsWhole(const TrainResult& resumed, const TrainResult& whole) {
  REQUIRE(resumed.start_step == 4);
  REQUIRE(resumed.losses.size() == 8);
  for (size_t i = 0; i < resumed.losses.size(); ++i) {
    INFO("step " << 5 + i);
    CHECK(resumed.losses[i] == whole.losses[4 + i]);
  }
}

TEST_CASE("NVMe tier: killed and resumed from a checkpoint, the same losses bitwise", "[nvme][train][resume]") {
  const CutRun r = WholeAndCut("nvme_resume", {"precision.dtype=bf16", "optimizer.hybrid_adam=false",
                                               "chunk.nvme_host_budget_bytes=0", "chunk.nvme_dir=" + NvmeDir("resume")});
  CheckResumedAsWhole(Train(r.cut), r.whole);  // a new process's tier: its state from step 4's checkpoint
}

// Disk full when a resumed run sets its tier up (the file may not grow past a limit:
// EFBIG on reserving it): the run stops with an error naming the tier's directory, leaves
// the checkpoint it resumed from as it was, and a later resume reaches the losses of a
// run never interrupted. (The tier's mid-run I/O errors: nvme_file_test, nvme_ring_test.)
TEST_CASE("NVMe tier: a disk too full for the tier stops the resumed run; its checkpoint stays and resumes bitwise",
          "[nvme][train][disk_full]") {
  const std::string dir = NvmeDir("full");
  const CutRun r =
      WholeAndCut("nvme_full", {"optimizer.hybrid_adam=false", "chunk.nvme_host_budget_bytes=0", "chunk.nvme_dir=" + dir});
  const Config& c = r.cut;
  const std::string saved = c.run.output_dir + "/checkpoints/step_4";
  REQUIRE(ListCheckpoints(c.run.output_dir + "/checkpoints").front() == saved);
  const int status = testing::RunWithFileSizeLimit(64 * 1024, [&] {
    try {
      Train(c);
    } catch (const std::exception& e) {
      const std::string what = e.what();
      return what.find("NVMe tier") != std::string::npos && what.find(dir) != std::string::npos &&
                     what.find("File too large") != std::string::npos
                 ? 0
                 : 3;
    }
    return 2;  // trained on as if nothing happened
  });
  CHECK(status == 0);
  CHECK(ListCheckpoints(c.run.output_dir + "/checkpoints").front() == saved);
  CHECK(ReadCheckpoint(saved).step == 4);
  CheckResumedAsWhole(Train(c), r.whole);
}

TEST_CASE("NVMe tier: refusals before training name the key", "[nvme][config]") {
  const std::string missing = TempDir() + "/no_such_dir";
  const Config c = Tiny("nvme_missing", {"optimizer.hybrid_adam=false", "chunk.nvme_host_budget_bytes=0",
                                         "chunk.nvme_dir=" + missing});
  CHECK_THROWS_WITH(Train(c), Catch::Contains("chunk.nvme_dir: directory '" + missing + "' cannot be used") &&
                                  Catch::Contains("bytes)"));
  CHECK(ListCheckpoints(c.run.output_dir + "/checkpoints").empty());
  // The same directory where the plan puts nothing on the tier (host memory holds it all).
  CHECK_THROWS_WITH(Train(Tiny("nvme_missing_unused", {"chunk.nvme_dir=" + missing})),
                    Catch::Contains("chunk.nvme_dir: directory '" + missing + "' cannot be used") &&
                        Catch::Contains("puts no optimizer state there this run"));
  CHECK_THROWS_WITH(Tiny("nvme_spec", {"chunk.nvme_dir=" + NvmeDir("spec"), "optimizer.speculation_slots=2"}),
                    Catch::Contains("chunk.nvme_dir and optimizer.speculation_slots 2 cannot be combined"));
  CHECK_THROWS_WITH(Tiny("nvme_plain", {"chunk.enabled=false", "chunk.nvme_dir=" + NvmeDir("plain")}),
                    Catch::Contains("chunk.nvme_dir needs chunk.enabled: true"));
  // The tier's own keys without a tier: named, where they were set.
  CHECK_THROWS_WITH(Tiny("nvme_keys", {"chunk.nvme_host_budget_bytes=0"}),
                    Catch::Contains("--set chunk.nvme_host_budget_bytes=0: chunk.nvme_host_budget_bytes is set but "
                                    "chunk.nvme_dir is empty"));
  CHECK_THROWS_WITH(Tiny("nvme_keys", {"chunk.nvme_ring_slots=8"}),
                    Catch::Contains("chunk.nvme_ring_slots is set but chunk.nvme_dir is empty"));
  // --plan refuses the same directory (exit 3), with the same reason.
  bool fits = true;
  const std::string plan = PlanReport(c, at::kCPU, &fits);
  CHECK_FALSE(fits);
  CHECK_THAT(plan, Catch::Contains("refused           chunk.nvme_dir: directory '" + missing + "' cannot be used"));
}

TEST_CASE("a refused plan claims nothing: run.overwrite keeps the earlier run", "[nvme][config][overwrite]") {
  const Config earlier = Tiny("refused_overwrite", {"train.max_steps=2"});
  Train(earlier);
  const std::string folder = earlier.run.output_dir;
  const std::vector<std::string> saved = ListCheckpoints(folder + "/checkpoints");
  REQUIRE(saved.size() == 1);
  const auto config_text = [&] {
    std::ifstream in(folder + "/config.resolved.yaml");
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  const std::string config_before = config_text();
  const std::string missing = TempDir() + "/no_such_dir";
  for (const std::vector<std::string>& refused :
       {std::vector<std::string>{"chunk.nvme_dir=" + missing, "chunk.nvme_host_budget_bytes=0",
                                 "optimizer.hybrid_adam=false"},
        std::vector<std::string>{"chunk.host_budget_bytes=100000"}}) {
    std::vector<std::string> extra = refused;
    extra.push_back("run.overwrite=true");
    extra.push_back("train.max_steps=2");
    INFO(refused.front());
    CHECK_THROWS_WITH(Train(Tiny("refused_overwrite", extra)),
                      Catch::Contains(refused.size() > 1 ? "chunk.nvme_dir: directory" : "does not fit"));
    CHECK(ListCheckpoints(folder + "/checkpoints") == saved);  // not deleted by the overwrite
    CHECK(ReadCheckpoint(saved.front()).step == 2);
    CHECK(config_text() == config_before);  // not rewritten with the refused config
  }
}

}  // namespace ps::trainer
