// `--plan` and the run agree (issue #9 §2): on the simulated device tier, a sweep over
// model shapes, device budgets (fixed, and traced with the default warm-up share) and
// host budgets a few percent either side of what the plan says each needs. Every run
// the plan admits trains 2 steps within its budgets (the store refuses to exceed a
// tier's budget at any moment, so training at all is the proof); every run it refuses
// fails before training with the plan's own reason. Also the reproduction: a
// traced budget with a host budget a few percent above the old plan's host figure.
#include <cmath>
#include <fstream>

#include "tests/temp_dir.h"
#include "trainer/config/config_loader.h"
#include "trainer/engine/chunk_setup.h"
#include "trainer/train_loop.h"
// Last: c10 headers define a glog-style CHECK that Catch must override.
#include "tests/catch.h"

namespace ps::trainer {
namespace {

using testing::TempDir;

std::string Corpus() {
  static const std::string path = [] {
    const std::string p = TempDir() + "/capacity_corpus.txt";
    std::ofstream out(p);
    for (int i = 0; i < 200; ++i) out << "the cat sat on the mat. the dog ran to the log. " << i << " ";
    return p;
  }();
  return path;
}

struct Shape {
  const char* name;
  std::vector<std::string> settings;
};

// Tiny models, 2 steps: chunks of 20k elements split each block.
Config Run(const std::string& name, const Shape& shape, std::vector<std::string> extra) {
  std::vector<std::string> overrides = {"data.train_path=" + Corpus(), "run.output_dir=" + TempDir() + "/cap_" + name,
                                        "run.threads=1", "run.overwrite=true", "checkpoint.resume=never",
                                        "checkpoint.at_end=false", "chunk.enabled=true", "chunk.size_elements=20000",
                                        "chunk.timeline_steps=0"};
  overrides.insert(overrides.end(), shape.settings.begin(), shape.settings.end());
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  return LoadConfigText(
      "model: {n_layer: 2, n_head: 2, n_embd: 64, n_positions: 32, vocab_size: 256}\n"
      "data: {format: text, seq_len: 32}\n"
      "train: {micro_batch_size: 4, global_batch_size: 4, max_steps: 2, grad_clip: 1.0}\n"
      "optimizer: {lr: 3.0e-3, weight_decay: 0.1}\n"
      "logging: {level: error, log_every: 1}\n",
      "capacity.yaml", overrides, ProcessEnv());
}

// Trains `c` if the plan admits it, else expects the plan's refusal. Returns whether it fit.
bool CheckAgreement(const Config& c) {
  const RunPlan plan = PlanRun(c, at::kCPU);
  bool fits = false;
  INFO(PlanReport(c, at::kCPU, &fits));
  CHECK(fits == plan.plan.fits);
  if (plan.plan.fits) {
    TrainResult r;
    CHECK_NOTHROW(r = Train(c));
    CHECK(r.losses.size() == 2);
    if (!r.losses.empty()) CHECK(std::isfinite(r.losses.back()));
    CHECK(r.peak_device_chunk_bytes <= plan.budgets.device_bytes);
    return true;
  }
  REQUIRE_FALSE(plan.plan.why_not.empty());
  try {
    Train(c);
    FAIL("the plan refused this run, but it trained");
  } catch (const ConfigError& e) {
    CHECK(std::string(e.what()) == "this run does not fit its memory budgets: " + plan.plan.why_not);
  }
  return false;
}

TEST_CASE("--plan and the run agree across shapes and budgets either side of the limits", "[capacity][plan]") {
  const std::vector<Shape> shapes = {
      {"fp32", {}},
      {"bf16", {"precision.dtype=bf16"}},  // gradients reuse the compute slots
      {"bf16_accum", {"precision.dtype=bf16", "train.micro_batch_size=2"}},  // fp32 grad chunks
      {"fp32_ckpt_untied", {"model.activation_checkpointing=true", "model.tie_word_embeddings=false"}},
  };
  int admitted = 0, refused = 0;
  for (const auto& shape : shapes) {
    // Device settings: fixed budgets around the working set, and traced capacities
    // around the activation estimate plus the working set (default warm-up share).
    const RunPlan probe = PlanRun(Run("probe", shape, {"chunk.device_budget_bytes=100000000"}), at::kCPU);
    const double ws = static_cast<double>(probe.plan.min_device_bytes);
    const double act = static_cast<double>(probe.activation_bytes);
    std::vector<std::vector<std::string>> devices;
    for (double f : {0.97, 1.03, 2.0, 6.0}) {
      devices.push_back({"chunk.device_budget_bytes=" + std::to_string(static_cast<int64_t>(f * ws))});
    }
    for (double f : {0.97, 1.03, 1.5}) {
      devices.push_back({"chunk.device_memory_bytes=" + std::to_string(static_cast<int64_t>(f * (act + ws))),
                         "chunk.device_mem_ratio=1.0"});
    }
    for (const auto& device : devices) {
      // The host budget the plan says this device setting needs, then either side of it.
      std::vector<std::string> big = device;
      big.push_back("chunk.host_budget_bytes=1000000000");
      const RunPlan at_limit = PlanRun(Run("limit", shape, big), at::kCPU);
      const double host = static_cast<double>(at_limit.plan.host_bytes);
      for (double f : {0.9, 0.99, 1.0, 1.03, 1.1}) {
        std::vector<std::string> extra = device;
        extra.push_back("chunk.host_budget_bytes=" + std::to_string(static_cast<int64_t>(std::ceil(f * host))));
        const std::string label = std::string(shape.name) + " " + device[0] + " host x" + std::to_string(f);
        INFO(label);
        const bool fit = CheckAgreement(Run(shape.name, shape, extra));
        (fit ? admitted : refused) += 1;
        // Exactly at the plan's host figure it fits (if the device does); below, never.
        if (f < 1.0) CHECK_FALSE(fit);
      }
    }
  }
  INFO("admitted " << admitted << ", refused " << refused);
  CHECK(admitted > 30);
  CHECK(refused > 30);
}

TEST_CASE("issue #9: traced device, host budget 3-10% above the old plan's figure: plan and run agree",
          "[capacity][plan]") {
  // Before: --plan counted only the compute chunks the device could not hold, said
  // "fits", and the run failed in start-up with "host budget ... cannot take chunk".
  // 5 blocks of n_embd 64 (16 chunks), 3.8 MB traced device: the old plan said the host
  // needs 4.38 MiB (4.59 MB); 4.8 and 5.0 MB are 5% and 9% above it.
  const Shape five = {"five", {"model.n_layer=5"}};
  for (const char* host : {"4800000", "5000000"}) {
    INFO("host " << host);
    CheckAgreement(Run(std::string("issue_") + host, five,
                       {"chunk.device_memory_bytes=3800000", "chunk.device_mem_ratio=1.0",
                        std::string("chunk.host_budget_bytes=") + host}));
  }
}

}  // namespace
}  // namespace ps::trainer
