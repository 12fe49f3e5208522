// The plain training loop: loss falls on learnable text, metrics.jsonl has the promised
// fields, the LR follows the schedule, and gradient accumulation k x b equals batch k*b.
#include <cmath>
#include <fstream>
#include <sstream>

#include "optim/lr_schedule.h"
#include "tests/catch.h"
#include "tests/temp_dir.h"
#include "trainer/config/config_loader.h"
#include "trainer/train_loop.h"

namespace ps::trainer {
namespace {

using testing::TempDir;

std::string WriteCorpus() {
  return testing::WriteRepeatedText("corpus.txt", 400, "the cat sat on the mat. the dog ran to the log. ",
                                    /*numbered=*/false);
}

Config TinyRun(const std::string& name) {
  Config c = LoadConfigText(
      "model: {n_layer: 2, n_head: 2, n_embd: 32, n_positions: 32, vocab_size: 256}\n"
      "data: {format: text, seq_len: 32}\n"
      "train: {micro_batch_size: 8, global_batch_size: 8, max_steps: 40, eval_steps: 2}\n"
      "optimizer: {lr: 1.0e-2, weight_decay: 0.0}\n"
      "lr_schedule: {type: cosine, warmup_steps: 5, min_lr: 1.0e-3}\n"
      "logging: {level: warn, log_every: 10}\n",
      "test.yaml", {"data.train_path=" + WriteCorpus(), "run.output_dir=" + TempDir() + "/" + name, "run.threads=1",
                    "run.overwrite=true", "checkpoint.resume=never", "checkpoint.at_end=false"},
      ProcessEnv());
  return c;
}

std::vector<std::string> Lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

TEST_CASE("loss falls, metrics.jsonl is written, LR follows the schedule", "[train]") {
  Config c = TinyRun("falls");
  c.data.valid_path = c.data.train_path;
  const TrainResult r = Train(c);
  REQUIRE(r.losses.size() == 40);
  CHECK(r.losses.front() > 5.0);  // ~ln(256) at init
  CHECK(r.losses.back() < 0.5 * r.losses.front());
  CHECK(std::isfinite(r.final_eval_loss));
  CHECK(r.final_eval_loss < 0.5 * r.losses.front());

  optim::LrSchedule schedule(c.optimizer.lr, c.lr_schedule, c.train.max_steps);
  for (size_t i = 0; i < r.lrs.size(); ++i) CHECK(r.lrs[i] == Approx(schedule.LrAt(static_cast<int64_t>(i))));

  const auto lines = Lines(c.run.output_dir + "/metrics.jsonl");
  // Steps 1, 10, 20, 30, 40, one eval line, one summary.
  REQUIRE(lines.size() == 7);
  for (const char* key : {"\"step\": 1,", "\"loss\":", "\"lr\":", "\"tokens_per_s\":", "\"tflops\":", "\"grad_norm\":"}) {
    CHECK(lines.front().find(key) != std::string::npos);
  }
  CHECK(lines[4].find("\"step\": 40,") != std::string::npos);
  CHECK(lines[5].find("\"eval_loss\":") != std::string::npos);
  CHECK(lines.back().find("\"summary\": true") != std::string::npos);
  // Throughput: the summary's figure is the result's, and the mean over steps 2..40 is at
  // least their tokens over the whole run's wall time (which also holds step 1 and setup).
  const std::string& summary = lines.back();
  const auto number = [&](const std::string& key) {
    return std::stod(summary.substr(summary.find("\"" + key + "\": ") + key.size() + 4));
  };
  CHECK(number("tokens_per_s") == r.tokens_per_s);
  const double tokens_after_first = 39.0 * 8 * 32;
  CHECK(r.tokens_per_s >= tokens_after_first / number("elapsed_s"));
  std::ifstream resolved(c.run.output_dir + "/config.resolved.yaml");
  std::stringstream ss;
  ss << resolved.rdbuf();
  CHECK(ConfigToYaml(LoadConfigText(ss.str(), "resolved", {}, ProcessEnv())) == ConfigToYaml(c));
}

TEST_CASE("gradient accumulation k x b equals one batch of k*b (fp32)", "[train]") {
  Config big = TinyRun("accum_big");
  big.train.max_steps = 6;
  big.train.micro_batch_size = 8;
  big.train.global_batch_size = 8;
  Config accum = TinyRun("accum_small");
  accum.train.max_steps = 6;
  accum.train.micro_batch_size = 2;
  accum.train.global_batch_size = 8;
  const auto a = Train(big).losses;
  const auto b = Train(accum).losses;
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("step " << i + 1);
    CHECK(b[i] == Approx(a[i]).epsilon(1e-5));
  }
}

TEST_CASE("same seed, same losses; features the build lacks are refused", "[train]") {
  Config c = TinyRun("repeat");
  c.train.max_steps = 3;
  CHECK(Train(c).losses == Train(c).losses);
  c.precision.dtype = optim::Dtype::kFp16;
  CHECK_THROWS_WITH(Train(c), Catch::Contains("precision.dtype: fp16"));
}

TEST_CASE("bf16 autocast trains too", "[train][bf16]") {
  Config c = TinyRun("bf16");
  c.precision.dtype = optim::Dtype::kBf16;
  c.train.max_steps = 20;
  const auto r = Train(c);
  CHECK(r.losses.back() < 0.7 * r.losses.front());
}

}  // namespace
}  // namespace ps::trainer
