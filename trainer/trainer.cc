#include "trainer/trainer.h"

#include <ATen/ops/zeros.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <limits>
#include <utility>
#include <vector>

#include "trainer/io/rng_state.h"
#include "trainer/io/run_folder.h"
#include "trainer/loss_divisors.h"

namespace ps::trainer {

using Clock = std::chrono::steady_clock;

Trainer::Trainer(TrainerParts parts, const optim::LrSchedule& schedule, const optim::PrecisionConfig& precision,
                 TrainerSettings settings)
    : parts_(parts),
      schedule_(schedule),
      s_(std::move(settings)),
      divergence_(precision),
      samples_{0, 0, s_.global_batch_size} {}

void Trainer::Resume(const CheckpointContents& r, const std::string& path) {
  LogConfigChanges(r.config_yaml, s_.config_yaml);
  parts_.engine.Load(r.engine);
  parts_.batches.set_consumed_samples(r.consumed_samples);
  RestoreRngStates(r.rng, s_.device);
  start_step_ = r.step;
  divergence_.set_run(r.min_scale_skips);
  tokens_seen_ = r.tokens_seen;
  // The sampler's schedule goes on, or a new segment starts where the batch size changed.
  samples_ = r.samples.global_batch_size != s_.global_batch_size
                 ? SampleSchedule{r.step, r.consumed_samples, s_.global_batch_size}
                 : r.samples;
  spdlog::info("resumed from {} (step {}, {} samples consumed, written by {})", path, r.step, r.consumed_samples,
               r.version);
  parts_.logger.Record(JsonLine().Add("resumed_from_step", r.step).Add("checkpoint_path", path));
}

TrainResult Trainer::Run() {
  TrainResult result;
  result.start_step = start_step_;
  result.final_eval_loss = result.final_eval_accuracy = std::numeric_limits<double>::quiet_NaN();
  const auto contents = [this](int64_t step) { return Contents(step); };
  for (int64_t step = start_step_ + 1; step <= s_.max_steps; ++step) {
    const StepRecord r = Step(step);
    divergence_.CheckStep(r, step);
    tokens_seen_ += s_.tokens_per_step;
    Record(r, result);
    parts_.logger.MaybeLog(step, start_step_ + 1, r, tokens_seen_, parts_.engine);
    if (const auto eval = parts_.evaluator.MaybeEvaluate(step, s_.max_steps)) {
      result.final_eval_loss = eval->loss;
      result.final_eval_accuracy = eval->accuracy;
    }
    const int signal = s_.stop_requested ? s_.stop_requested->load() : 0;
    result.stop_signal = parts_.checkpoints.MaybeSave(step, signal, contents);
    if (result.stop_signal != 0) return result;
  }
  parts_.checkpoints.Finish();
  completed_ = true;
  result.tokens_per_s = parts_.logger.tokens_per_s();
  return result;
}

StepRecord Trainer::Step(int64_t step) {
  TrainingEngine& engine = parts_.engine;
  const auto t0 = Clock::now();
  StepRecord r;
  r.lr = schedule_.LrAt(step - 1);
  engine.BeginStep(r.lr);
  std::vector<models::Batch> micro_batches;
  for (int64_t m = 0; m < s_.accumulation_steps; ++m) micro_batches.push_back(parts_.batches.Next(s_.micro_batch_size));
  const std::vector<double> divisors =
      s_.target_weighted_loss ? TargetWeightedDivisors(micro_batches, s_.comm, engine.device()) : std::vector<double>{};
  const ForwardBackwardResult passes = engine.ForwardBackward(micro_batches, divisors);
  r.forward_ms = passes.forward_ms;
  r.backward_ms = passes.backward_ms;
  at::Tensor loss_sum = at::zeros({}, at::TensorOptions().device(engine.device()));
  AccuracyCounts counts;
  for (const auto& out : passes.outs) {
    loss_sum += out.loss;
    counts.Add(out);
  }
  engine.SyncGradients();
  if (s_.comm) s_.comm->AllReduce(loss_sum, comm::ReduceOp::kAvg)->Wait();  // the loss of the global batch
  const double max_norm = s_.grad_clip > 0 ? s_.grad_clip : std::numeric_limits<double>::infinity();
  const auto optimizer_start = engine.PhaseBoundary();
  r.outcome = engine.OptimizerStep(r.lr, max_norm);
  r.optimizer_ms = MsBetween(optimizer_start, engine.PhaseBoundary());
  divergence_.CheckUpdate(r.outcome, step);
  engine.EndStep(step);
  r.loss = loss_sum.item<double>();  // host sync: the step is done
  r.accuracy = counts.Share(s_.comm);
  r.step_s = std::chrono::duration<double>(Clock::now() - t0).count();
  return r;
}

void Trainer::Record(const StepRecord& r, TrainResult& result) const {
  result.losses.push_back(r.loss);
  if (s_.records_accuracy) result.accuracies.push_back(r.accuracy);
  result.lrs.push_back(r.lr);
  result.loss_scales.push_back(r.outcome.loss_scale);
  result.skipped.push_back(r.outcome.skipped);
}

CheckpointContents Trainer::Contents(int64_t step) const {
  CheckpointContents out;
  out.step = step;
  out.samples = samples_;
  out.run_name = s_.run.name;
  out.run_output_dir = s_.run.output_dir;
  out.fingerprint = s_.run.fingerprint;
  out.min_scale_skips = divergence_.run();
  out.consumed_samples = parts_.batches.consumed_samples();
  out.tokens_seen = tokens_seen_;
  out.engine = parts_.engine.Save();
  out.rng = SaveRngStates(s_.device);
  out.config_yaml = s_.config_yaml;
  out.version = s_.version;
  return out;
}

}  // namespace ps::trainer
