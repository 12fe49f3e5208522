// Chat data's loss (data.format: sft) is the mean over the counted targets of the whole
// global batch: with micro-batches that count different numbers of targets, k
// micro-batches of b sequences train as one batch of k x b (losses of two steps and the
// first step's gradients, plain fp32 engine over a tiny GPT), and the mean of the
// micro-batches' means (the 2024 gradient-accumulation bug) does not. Also the divisors
// themselves, over two ranks (a scripted second rank).
#include <ATen/ops/full.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/allclose.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "models/param_init.h"
#include "tests/temp_dir.h"
#include "trainer/config/config_loader.h"
#include "trainer/engine/engine.h"
#include "trainer/engine/engine_factory.h"
#include "trainer/engine/model_factory.h"
#include "trainer/loss_divisors.h"
#include "trainer/trainer.h"
// Last: c10 headers define a glog-style CHECK that Catch must override.
#include "tests/catch.h"

namespace ps::trainer {
namespace {

constexpr int64_t kSeq = 16;

// 8 sequences of chat-like labels: row r trains on its last 2 + 2r positions only
// (prompt tokens and padding are -100), so rows count 2 to 16 targets.
models::Batch ChatBatch(uint64_t seed) {
  at::manual_seed(seed);
  models::Batch b;
  b.input_ids = at::randint(0, 64, {8, kSeq}, at::kLong);
  b.labels = at::randint(0, 64, {8, kSeq}, at::kLong);
  for (int64_t r = 0; r < 8; ++r) b.labels[r].narrow(0, 0, kSeq - (2 + 2 * r)).fill_(-100);
  return b;
}

// The same global batches, step after step, cut into micro-batches of `micro` rows.
class ChatBatches final : public BatchSource {
 public:
  models::Batch Next(int64_t micro_batch) override {
    const int64_t step = consumed_ / 8, row = consumed_ % 8;
    const models::Batch whole = ChatBatch(100 + static_cast<uint64_t>(step));
    consumed_ += micro_batch;
    models::Batch b;
    b.input_ids = whole.input_ids.narrow(0, row, micro_batch).clone();
    b.labels = whole.labels.narrow(0, row, micro_batch).clone();
    return b;
  }
  int64_t consumed_samples() const override { return consumed_; }
  void set_consumed_samples(int64_t n) override { consumed_ = n; }
  int64_t samples_per_epoch() const override { return 1 << 20; }

 private:
  int64_t consumed_ = 0;
};

Config TinyGpt() {
  return LoadConfigText(
      "model: {n_layer: 2, n_head: 2, n_embd: 32, n_positions: 16, vocab_size: 64, dropout: 0.0}\n"
      "data: {seq_len: 16, format: synthetic}\n"
      "train: {micro_batch_size: 8, global_batch_size: 8, max_steps: 2, grad_clip: 0}\n"
      "optimizer: {lr: 1.0e-2}\n"
      "precision: {dtype: fp32}\n"
      "run: {device: cpu, threads: 1}\n",
      "tiny.yaml", {}, ProcessEnv());
}

struct Outcome {
  std::vector<double> losses;
  models::TensorMap exp_avg;  // Adam's first moment: after one step, 0.1 x the gradient
};

// `steps` optimizer steps of global batch 8 in micro-batches of `micro` rows.
Outcome Run(int64_t micro, bool target_weighted, int64_t steps) {
  const Config c = TinyGpt();
  std::unique_ptr<TrainingEngine> engine = MakeEngine(MakeModel(c), c, at::kCPU, models::InitPlan{7, {}});
  ChatBatches batches;
  StepLogger logger(c.logging, LogFacts{steps, 8 * kSeq}, {});
  Evaluator evaluator(c.train, false, EvalMean::kTargets, nullptr, *engine, logger);
  CheckpointConfig no_saves;
  no_saves.at_end = false;
  const std::string dir = testing::TempDir() + "/target_weighting";
  Checkpointer checkpointer(no_saves, dir, {"t", dir, nlohmann::json::object()});
  CheckpointPolicy policy(no_saves, steps, {}, checkpointer, logger);
  const optim::LrSchedule schedule(1e-2, c.lr_schedule, steps);
  TrainerSettings s;
  s.max_steps = steps;
  s.micro_batch_size = micro;
  s.accumulation_steps = 8 / micro;
  s.global_batch_size = 8;
  s.tokens_per_step = 8 * kSeq;
  s.target_weighted_loss = target_weighted;
  Trainer trainer({*engine, batches, logger, evaluator, policy}, schedule, c.precision, s);
  Outcome out;
  out.losses = trainer.Run().losses;
  out.exp_avg = engine->Save().exp_avg;
  return out;
}

bool AllClose(const models::TensorMap& a, const models::TensorMap& b, double rtol, double atol) {
  REQUIRE(a.size() == b.size());
  for (const auto& [name, t] : a) {
    if (!at::allclose(t, b.at(name), rtol, atol)) return false;
  }
  return true;
}

TEST_CASE("k micro-batches weighted by targets equal one batch of k times the size", "[sft][accumulation]") {
  // fp32: the same sums in another order. Losses of two steps (the second after an
  // update) within 1e-5 relative; the first step's gradients (Adam's first moment) within
  // 1e-4 relative + 1e-7.
  const Outcome whole = Run(8, true, 2), split = Run(2, true, 2);
  REQUIRE(whole.losses.size() == 2);
  CHECK(split.losses[0] == Approx(whole.losses[0]).epsilon(1e-5));
  CHECK(split.losses[1] == Approx(whole.losses[1]).epsilon(1e-5));
  const Outcome whole_grads = Run(8, true, 1), split_grads = Run(2, true, 1);
  CHECK(AllClose(split_grads.exp_avg, whole_grads.exp_avg, 1e-4, 1e-7));

  // What the bug computes (the mean of the micro-batches' means): rows of few targets count more.
  const Outcome mean_of_means = Run(2, false, 1);
  CHECK(mean_of_means.losses[0] != Approx(whole.losses[0]).epsilon(1e-3));
  CHECK_FALSE(AllClose(mean_of_means.exp_avg, whole_grads.exp_avg, 1e-4, 1e-7));
}

// A second rank whose micro-batches count `other_targets` targets in all.
class OtherRank final : public comm::Communicator {
 public:
  explicit OtherRank(int64_t other_targets) : other_(other_targets) {}
  int rank() const override { return 0; }
  int world_size() const override { return 2; }
  const char* backend() const override { return "gloo"; }
  comm::WorkPtr AllReduce(at::Tensor t, comm::ReduceOp op) override {
    REQUIRE(op == comm::ReduceOp::kSum);
    t.add_(other_);
    return std::make_shared<Done>();
  }
  comm::WorkPtr Broadcast(at::Tensor, int) override { return std::make_shared<Done>(); }
  comm::WorkPtr AllGather(at::Tensor, at::Tensor) override { return std::make_shared<Done>(); }
  comm::WorkPtr ReduceScatter(at::Tensor, at::Tensor, comm::ReduceOp) override { return std::make_shared<Done>(); }
  comm::WorkPtr Barrier() override { return std::make_shared<Done>(); }

 private:
  struct Done final : comm::Work {
    void Wait() override {}
  };
  int64_t other_;
};

TEST_CASE("divisors count the targets of every micro-batch of every rank", "[sft][ranks]") {
  models::Batch a, b, none;
  a.labels = at::tensor({1, 2, -100, 3}, at::kLong).view({1, 4});  // 3 targets
  b.labels = at::tensor({-100, 5, -100, -100}, at::kLong).view({1, 4});  // 1
  none.labels = at::full({1, 4}, -100, at::kLong);
  CHECK(TargetWeightedDivisors({a, b, none}, nullptr, at::kCPU) == std::vector<double>{4.0 / 3.0, 4.0, 1.0});
  OtherRank other(12);  // the global batch counts 4 + 12 = 16 targets over 2 ranks
  CHECK(TargetWeightedDivisors({a, b}, &other, at::kCPU) == std::vector<double>{16.0 / 6.0, 16.0 / 2.0});
}

}  // namespace
}  // namespace ps::trainer
