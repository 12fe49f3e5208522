// The Trainer's loop policy against a fake engine, in milliseconds: which steps the
// components act on (logging, evaluation, checkpoint cadences), a resume that goes on
// exactly as an uninterrupted run, a stop signal (this process's, or another rank's,
// agreed), the divergence stop, and the engine's accumulation schedule. The fake's
// state is one small tensor whose value depends on every step and every batch it saw,
// so a resume that restores the wrong step, batches or state shows in the losses.
#include <ATen/TensorOperators.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/full.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/zeros.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "tests/temp_dir.h"
#include "trainer/checkpoint_policy.h"
#include "trainer/evaluator.h"
#include "trainer/io/checkpointer.h"
#include "trainer/logging/step_logger.h"
#include "trainer/trainer.h"
// Last: c10 headers define a glog-style CHECK that Catch must override.
#include "tests/catch.h"

namespace ps::trainer {
namespace {

namespace fs = std::filesystem;

// Sample i of the stream holds the value i in every token: where the stream stands
// shows in the losses.
class CountingBatches final : public BatchSource {
 public:
  models::Batch Next(int64_t micro_batch) override {
    models::Batch b;
    b.input_ids = at::arange(next_, next_ + micro_batch, at::kLong).unsqueeze(1).expand({micro_batch, 4}).contiguous();
    next_ += micro_batch;
    return b;
  }
  int64_t consumed_samples() const override { return next_; }
  void set_consumed_samples(int64_t n) override { next_ = n; }
  int64_t samples_per_epoch() const override { return 1000; }

 private:
  int64_t next_ = 0;
};

// A model of one parameter w (2 values). The loss of a batch is w[0] + 0.01 * the mean
// token; the update adds lr * (1 + the step's first batch value) to w[0], so the state
// depends on everything seen. `outcomes` scripts what OptimizerStep reports at a step.
class FakeEngine final : public TrainingEngine {
 public:
  std::vector<std::string> calls;            // "begin", "forward", "forward_many", "backward", "sync", "update", "end", "eval"
  std::map<int64_t, StepOutcome> outcomes;   // step -> what the update reports
  std::map<int64_t, double> losses;          // step -> the loss every micro-batch reports instead
  std::function<void(int64_t)> on_end_step;  // after EndStep(step)
  int64_t kill_at = 0;                       // OptimizerStep of this step throws (a killed process)

  void BeginStep(double lr) override {
    calls.push_back("begin");
    ++step_;
    lr_ = lr;
    first_value_ = -1;
  }
  models::LossOutput Forward(const models::Batch& batch, int64_t, double loss_divisor) override {
    calls.push_back("forward");
    return {LossOf(batch) / loss_divisor, {}, {}};
  }
  std::vector<models::LossOutput> ForwardMany(const std::vector<models::Batch>& batches,
                                              const std::vector<double>& loss_divisors) override {
    calls.push_back("forward_many");
    std::vector<models::LossOutput> outs;
    for (size_t m = 0; m < batches.size(); ++m) outs.push_back({LossOf(batches[m]) / loss_divisors[m], {}, {}});
    return outs;
  }
  void Backward(const at::Tensor&) override { calls.push_back("backward"); }
  void SyncGradients() override { calls.push_back("sync"); }
  StepOutcome OptimizerStep(double lr, double) override {
    calls.push_back("update");
    if (step_ == kill_at) throw std::runtime_error("killed");
    StepOutcome o = outcomes.count(step_) ? outcomes[step_] : StepOutcome{};
    if (!o.skipped) {
      w_[0] += lr * (1.0 + static_cast<double>(first_value_));
      ++adam_steps_;
    }
    return o;
  }
  void EndStep(int64_t step) override {
    calls.push_back("end");
    if (on_end_step) on_end_step(step);
  }
  void AddStepMetrics(MetricFields& fields) override {
    fields.Add("fake_moved_bytes", int64_t{5000000000}).Add("fake_move_ms", 0.25);
  }
  void BeginEval() override { calls.push_back("eval"); }
  models::LossOutput EvalLoss(const models::Batch& batch) override { return {LossOf(batch), {}, {}}; }
  void EndEval() override {}
  EngineState Save() const override {
    EngineState s;
    s.params["w"] = w_.clone();
    s.adam_steps["w"] = adam_steps_;
    s.extra = {{"fake_step", step_}};
    return s;
  }
  void Load(const EngineState& s) override {
    w_ = s.params.at("w").clone();
    adam_steps_ = s.adam_steps.at("w");
    step_ = s.extra.at("fake_step").get<int64_t>();
  }
  at::Device device() const override { return at::kCPU; }

  double w0() const { return w_[0].item<double>(); }

 private:
  at::Tensor LossOf(const models::Batch& b) {
    const double value = static_cast<double>(b.input_ids[0][0].item<int64_t>());
    if (first_value_ < 0) first_value_ = static_cast<int64_t>(value);
    if (losses.count(step_)) return at::full({}, losses[step_], at::kDouble);
    return (w_[0] + 0.01 * b.input_ids.to(at::kDouble).mean()).to(at::kDouble);
  }

  at::Tensor w_ = at::zeros({2}, at::kFloat);
  int64_t adam_steps_ = 0;
  int64_t step_ = 0;
  double lr_ = 0;
  int64_t first_value_ = -1;
};

// The other rank of a run of two, scripted: its stop signal at each agreement (by the
// count of max-reductions so far) and its loss. This process is rank `rank`.
class OtherRank final : public comm::Communicator {
 public:
  explicit OtherRank(int rank) : rank_(rank) {}
  std::map<int, int64_t> signal_at;  // max-reduction number (from 1) -> the other rank's signal
  double other_loss = 0.0;
  int max_reductions = 0;

  int rank() const override { return rank_; }
  int world_size() const override { return 2; }
  const char* backend() const override { return "gloo"; }
  comm::WorkPtr AllReduce(at::Tensor t, comm::ReduceOp op) override {
    if (op == comm::ReduceOp::kMax) {
      ++max_reductions;
      const int64_t other = signal_at.count(max_reductions) ? signal_at[max_reductions] : 0;
      t.fill_(std::max(t.item<int64_t>(), other));
    } else if (op == comm::ReduceOp::kAvg) {
      t.copy_((t + other_loss) / 2);
    } else {
      throw std::runtime_error("unexpected reduction");
    }
    return std::make_shared<Done>();
  }
  comm::WorkPtr Broadcast(at::Tensor, int) override { return std::make_shared<Done>(); }
  comm::WorkPtr AllGather(at::Tensor, at::Tensor) override { throw std::runtime_error("unexpected gather"); }
  comm::WorkPtr ReduceScatter(at::Tensor, at::Tensor, comm::ReduceOp) override {
    throw std::runtime_error("unexpected reduce-scatter");
  }
  comm::WorkPtr Barrier() override { return std::make_shared<Done>(); }

 private:
  struct Done final : comm::Work {
    void Wait() override {}
  };
  int rank_;
};

// Everything a Trainer needs, built around a FakeEngine in a fresh folder.
struct Rig {
  std::string dir;
  FakeEngine engine;
  CountingBatches batches;
  LoggingConfig logging;
  CheckpointConfig checkpoint;
  TrainConfig train;
  optim::PrecisionConfig precision;
  optim::LrScheduleConfig lr;
  std::atomic<int> stop{0};
  comm::Communicator* comm = nullptr;

  // `fresh`: an empty folder; otherwise the one an earlier Rig of this name left.
  explicit Rig(const std::string& name, bool fresh = true) : dir(testing::TempDir() + "/trainer_" + name) {
    if (fresh) fs::remove_all(dir);
    fs::create_directories(dir);
    train.max_steps = 12;
    train.micro_batch_size = 2;
    train.global_batch_size = 2;
    train.eval_steps = 1;
    checkpoint.async = false;
    checkpoint.at_end = false;
    checkpoint.keep = 100;
    lr.warmup_steps = 0;
  }
  RunIdentity Run() const { return {"fake", dir, nlohmann::json::object()}; }

  // Runs the Trainer to its end (or to what stops it); `resume`: from this checkpoint first.
  TrainResult Train(int64_t accumulation = 1, const std::optional<CheckpointContents>& resume = std::nullopt,
                    bool* completed = nullptr) {
    MetricsWriter metrics(dir + "/metrics.jsonl");
    LogFacts facts;
    facts.max_steps = train.max_steps;
    facts.tokens_per_step = train.global_batch_size * 4;
    StepLogger logger(logging, facts, {&metrics, nullptr});
    Evaluator evaluator(train, false, EvalMean::kExamples, [] { return std::make_unique<CountingBatches>(); }, engine, logger);
    Checkpointer checkpointer(checkpoint, dir + "/checkpoints", Run());
    CheckpointPolicy policy(checkpoint, train.max_steps, {comm, false, at::kCPU}, checkpointer, logger);
    const optim::LrSchedule schedule(1e-2, lr, train.max_steps);
    TrainerSettings s;
    s.max_steps = train.max_steps;
    s.micro_batch_size = train.micro_batch_size;
    s.accumulation_steps = accumulation;
    s.global_batch_size = train.global_batch_size;
    s.tokens_per_step = facts.tokens_per_step;
    s.stop_requested = &stop;
    s.comm = comm;
    s.run = Run();
    s.config_yaml = "fake: true\n";
    s.version = "test";
    Trainer trainer({engine, batches, logger, evaluator, policy}, schedule, precision, s);
    if (resume) trainer.Resume(*resume, "resumed");
    TrainResult r = trainer.Run();
    if (completed) *completed = trainer.completed();
    return r;
  }

  std::vector<std::string> MetricsLines() const {
    std::ifstream in(dir + "/metrics.jsonl");
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  }
  // The steps of lines holding `key` (logged steps: "\"loss\"", evaluations: "eval_loss").
  std::vector<int64_t> StepsWith(const std::string& key) const {
    std::vector<int64_t> steps;
    for (const auto& line : MetricsLines()) {
      if (line.find("\"" + key + "\"") == std::string::npos) continue;
      const auto json = nlohmann::json::parse(line);
      steps.push_back(json.contains("step") ? json["step"].get<int64_t>() : json["checkpoint_step"].get<int64_t>());
    }
    return steps;
  }
  std::set<std::string> Checkpoints() const {
    std::set<std::string> names;
    if (!fs::exists(dir + "/checkpoints")) return names;
    for (const auto& e : fs::directory_iterator(dir + "/checkpoints")) {
      if (e.path().filename().string().rfind("step_", 0) == 0) names.insert(e.path().filename().string());
    }
    return names;
  }
  CheckpointContents Newest() {
    std::string path;
    std::vector<std::string> unusable;
    auto found = FindResumeCheckpoint(checkpoint, dir + "/checkpoints", Run(), &path, &unusable);
    REQUIRE(found.has_value());
    return *found;
  }
};

TEST_CASE("each component acts on its own cadence", "[trainer]") {
  Rig rig("cadence");
  rig.logging.log_every = 4;
  rig.train.eval_every = 5;
  rig.checkpoint.every_steps = 3;
  rig.checkpoint.at_end = true;
  bool completed = false;
  const TrainResult r = rig.Train(1, std::nullopt, &completed);
  CHECK(completed);
  CHECK(r.losses.size() == 12);
  CHECK(rig.StepsWith("loss") == std::vector<int64_t>{1, 4, 8, 12});  // the first, every 4th, the last
  CHECK(rig.StepsWith("eval_loss") == std::vector<int64_t>{5, 10, 12});
  CHECK(rig.StepsWith("checkpoint_step") == std::vector<int64_t>{3, 6, 9, 12});
  CHECK(rig.Checkpoints() == std::set<std::string>{"step_3", "step_6", "step_9", "step_12"});
  CHECK(r.final_eval_loss == Approx(rig.engine.w0() + 0.01 * 0.5).epsilon(1e-6));  // validation samples 0 and 1
}

TEST_CASE("an engine's step figures reach every logged line, after the loop's own", "[trainer][metrics]") {
  Rig rig("engine_fields");
  rig.logging.log_every = 4;
  rig.Train();
  int logged = 0;
  for (const auto& line : rig.MetricsLines()) {
    if (line.find("\"loss\"") == std::string::npos || line.find("\"step\"") == std::string::npos) continue;
    ++logged;
    INFO(line);
    const size_t tokens = line.find("\"tokens\": ");
    const size_t moves = line.find("\"fake_moved_bytes\": 5000000000,");  // an integer, not 5e+09
    const size_t ms = line.find("\"fake_move_ms\": 0.25");
    REQUIRE(tokens != std::string::npos);
    REQUIRE(moves != std::string::npos);
    REQUIRE(ms != std::string::npos);
    CHECK(tokens < moves);
    CHECK(moves < ms);
  }
  CHECK(logged == 4);  // steps 1, 4, 8, 12
}

TEST_CASE("a run killed after its last checkpoint resumes exactly as an uninterrupted run", "[trainer][resume]") {
  Rig whole("whole");
  const TrainResult uninterrupted = whole.Train();

  Rig first("killed");
  first.checkpoint.every_steps = 4;
  first.engine.kill_at = 10;  // killed in step 10: step 8's checkpoint is the newest
  CHECK_THROWS_WITH(first.Train(), "killed");
  const CheckpointContents saved = first.Newest();
  CHECK(saved.step == 8);
  CHECK(saved.consumed_samples == 16);

  Rig second("killed", /*fresh=*/false);  // the same folder, a fresh process: new engine and batches
  second.checkpoint.every_steps = 4;
  const TrainResult resumed = second.Train(1, saved);
  CHECK(resumed.start_step == 8);
  const std::vector<double> tail(uninterrupted.losses.begin() + 8, uninterrupted.losses.end());
  CHECK(resumed.losses == tail);  // bitwise
  CHECK(resumed.lrs == std::vector<double>(uninterrupted.lrs.begin() + 8, uninterrupted.lrs.end()));
  CHECK(second.engine.w0() == whole.engine.w0());
  CHECK(second.batches.consumed_samples() == whole.batches.consumed_samples());
  bool logged = false;
  for (const auto& line : second.MetricsLines()) logged |= line.find("\"resumed_from_step\": 8") != std::string::npos;
  CHECK(logged);
}

TEST_CASE("a stop signal ends the run after the step with a checkpoint", "[trainer][signal]") {
  Rig rig("signal");
  rig.engine.on_end_step = [&rig](int64_t step) {
    if (step == 5) rig.stop = 15;
  };
  bool completed = true;
  const TrainResult r = rig.Train(1, std::nullopt, &completed);
  CHECK_FALSE(completed);
  CHECK(r.stop_signal == 15);
  CHECK(r.losses.size() == 5);
  CHECK(rig.Checkpoints() == std::set<std::string>{"step_5"});
  bool logged = false;
  for (const auto& line : rig.MetricsLines()) logged |= line.find("\"stopped_by_signal\": 15") != std::string::npos;
  CHECK(logged);
}

TEST_CASE("every rank stops at the step any rank got a signal at", "[trainer][ranks]") {
  SECTION("rank 0 saves, the loss logged is the mean over ranks") {
    Rig rig("rank0");
    OtherRank other(0);
    other.signal_at[3] = 2;  // the other rank's third agreement: after step 3
    other.other_loss = 7.0;
    rig.comm = &other;
    const TrainResult r = rig.Train();
    CHECK(r.stop_signal == 2);
    CHECK(r.losses.size() == 3);
    CHECK(rig.Checkpoints() == std::set<std::string>{"step_3"});
    CHECK(r.losses[0] == Approx((0.01 * 0.5 + 7.0) / 2));  // w starts at 0; samples 0 and 1
  }
  SECTION("rank 1 stops too, and leaves saving to rank 0") {
    Rig rig("rank1");
    OtherRank other(1);
    other.signal_at[2] = 15;
    rig.comm = &other;
    const TrainResult r = rig.Train();
    CHECK(r.stop_signal == 15);
    CHECK(r.losses.size() == 2);
    CHECK(rig.Checkpoints().empty());
  }
}

// A step the optimizer skipped for its gradient norm `norm`, which no loss scaler tolerates.
StepOutcome SkippedWithNorm(double norm) {
  StepOutcome outcome;
  outcome.skipped = true;
  outcome.grad_norm = norm;
  return outcome;
}

TEST_CASE("the divergence stop", "[trainer][diverge]") {
  SECTION("steps skipped at the minimum loss scale, up to the limit") {
    Rig rig("diverge");
    rig.precision.max_skips_at_min_scale = 3;
    StepOutcome skip;
    skip.skipped = skip.overflow_tolerated = skip.at_min_loss_scale = true;
    for (int64_t step : {2, 4, 5, 6}) rig.engine.outcomes[step] = skip;  // step 3 breaks the first run
    CHECK_THROWS_WITH(rig.Train(), Catch::Matchers::Contains("the last 3 steps (to step 6)"));
  }
  SECTION("a non-finite norm no scaler tolerates") {
    Rig rig("norm");
    rig.engine.outcomes[4] = SkippedWithNorm(std::nan(""));
    CHECK_THROWS_WITH(rig.Train(), Catch::Matchers::Contains("gradient norm became nan at step 4") &&
                                       Catch::Matchers::Contains("lower optimizer.lr"));
    CHECK(rig.engine.calls.back() == "update");  // the step is not ended
  }
  SECTION("a non-finite norm at the first step points at the initial weights") {
    Rig rig("first");
    rig.engine.outcomes[1] = SkippedWithNorm(std::nan(""));
    CHECK_THROWS_WITH(rig.Train(), Catch::Matchers::Contains("gradient norm became nan at step 1") &&
                                       Catch::Matchers::Contains("do the initial weights"));
  }
  SECTION("a finite norm too large to apply (above optim::kMaxUpdateGradNorm)") {
    Rig rig("huge");
    rig.engine.outcomes[2] = SkippedWithNorm(3e19);
    CHECK_THROWS_WITH(rig.Train(), Catch::Matchers::Contains("gradient norm became 3e+19 at step 2, above what "
                                                             "Adam's fp32 second moment holds (1e+19 after clipping)"));
  }
  SECTION("a non-finite loss") {
    Rig rig("loss");
    rig.engine.losses[7] = std::numeric_limits<double>::infinity();
    CHECK_THROWS_WITH(rig.Train(), Catch::Matchers::Contains("training loss became inf at step 7"));
  }
}

TEST_CASE("the engine runs the accumulation schedule", "[trainer][accumulation]") {
  auto calls_of_one_step = [](bool vertical) {
    Rig rig(vertical ? "vertical" : "horizontal");
    rig.train.max_steps = 1;
    rig.engine.set_accumulation(vertical, false);
    const TrainResult r = rig.Train(/*accumulation=*/3);
    CHECK(r.losses[0] == Approx(0.01 * 7.5 / 3.0));  // (samples 0-1, 2-3, 4-5: means 0.5, 2.5, 4.5) / 3
    CHECK(rig.batches.consumed_samples() == 6);
    return rig.engine.calls;
  };
  CHECK(calls_of_one_step(false) == std::vector<std::string>{"begin", "forward", "backward", "forward", "backward",
                                                             "forward", "backward", "sync", "update", "end", "eval"});
  CHECK(calls_of_one_step(true) ==
        std::vector<std::string>{"begin", "forward_many", "backward", "sync", "update", "end", "eval"});
}

}  // namespace
}  // namespace ps::trainer
