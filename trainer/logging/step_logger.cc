#include "trainer/logging/step_logger.h"

#include <spdlog/spdlog.h>

#include <cmath>
#include <utility>
#include <variant>
#include <vector>

#include "trainer/logging/host_memory.h"

namespace ps::trainer {

std::string TensorBoardTag(const std::string& key) {
  for (const char* k : {"loss", "lr", "grad_norm", "tokens"}) {
    if (key == k) return "train/" + key;
  }
  for (const char* k : {"tokens_per_s", "tflops", "step_ms", "forward_ms", "backward_ms", "optimizer_ms"}) {
    if (key == k) return "perf/" + key;
  }
  for (const char* k : {"loss_scale", "skipped_steps"}) {
    if (key == k) return "precision/" + key;
  }
  return "engine/" + key;
}

StepLogger::StepLogger(const LoggingConfig& config, LogFacts facts, LogSinks sinks)
    : config_(config), facts_(std::move(facts)), sinks_(sinks) {}

void StepLogger::MaybeLog(int64_t step, int64_t first_step, const StepRecord& record, int64_t tokens_seen,
                          TrainingEngine& engine) {
  const bool first = step == first_step, last = step == facts_.max_steps;
  const auto step_end = std::chrono::steady_clock::now();
  if (first) first_step_end_ = step_end;
  if (!first || last) {  // the first step (warm-up, allocations) is not timed unless it is the only one
    timed_s_ += record.step_s;
    timed_tokens_ += facts_.tokens_per_step;
  }
  if (step % config_.log_every != 0 && !first && !last) return;
  // Wall time, evaluations and checkpoints included; the first step (warm-up) only until
  // there is another.
  const int64_t paced_steps = step - first_step;
  const double s_per_step =
      paced_steps > 0 ? std::chrono::duration<double>(step_end - first_step_end_).count() / paced_steps
                      : record.step_s;
  Write(step, record, tokens_seen, s_per_step * static_cast<double>(facts_.max_steps - step), engine);
}

void StepLogger::Write(int64_t step, const StepRecord& r, int64_t tokens_seen, double eta_s, TrainingEngine& engine) {
  const double tokens_per_s = facts_.tokens_per_step / r.step_s;
  const double tflops = facts_.flops_per_token * tokens_per_s / 1e12;
  StepLine console;
  console.step = step;
  console.max_steps = facts_.max_steps;
  console.loss = r.loss;
  console.lr = r.lr;
  console.grad_norm = r.outcome.grad_norm;
  console.step_ms = r.step_s * 1e3;
  console.tokens_per_s = tokens_per_s;
  console.tflops = tflops;
  console.eta_s = eta_s;
  spdlog::info("{}", FormatStepLine(console));
  JsonLine line;
  line.Add("step", step)
      .Add("loss", r.loss)
      .Add("lr", r.lr)
      .Add("grad_norm", r.outcome.grad_norm)
      .Add("step_ms", r.step_s * 1e3)
      .Add("tokens_per_s", tokens_per_s)
      .Add("tflops", tflops)
      .Add("tokens", tokens_seen);
  if (!facts_.accuracy_name.empty()) line.Add(facts_.accuracy_name, r.accuracy);
  if (config_.step_breakdown) {
    line.Add("forward_ms", r.forward_ms).Add("backward_ms", r.backward_ms).Add("optimizer_ms", r.optimizer_ms);
  }
  MetricFields engine_fields;
  engine.AddStepMetrics(engine_fields);
  for (const auto& [key, value] : engine_fields.fields()) {
    std::visit([&line, &key = key](auto v) { line.Add(key, v); }, value);
  }
  if (const auto host = ReadHostMemory()) {  // resident memory now and its peak so far
    line.Add("host_rss_bytes", host->rss_bytes)
        .Add("host_peak_rss_bytes", host->peak_rss_bytes)
        .Add("host_anon_bytes", host->anon_bytes)
        .Add("host_file_bytes", host->file_bytes);
  }
  if (sinks_.metrics) sinks_.metrics->Write(line);
  if (sinks_.tensorboard) {
    std::vector<std::pair<std::string, double>> scalars;
    for (const auto& [key, value] : line.numeric_fields()) {
      if (key != "step") scalars.emplace_back(TensorBoardTag(key), value);
    }
    sinks_.tensorboard->WriteScalars(step, scalars);
  }
}

void StepLogger::LogEval(const EvalResult& eval, int64_t step) {
  const double perplexity = Perplexity(eval.loss);
  const bool accuracy = !facts_.accuracy_name.empty();
  spdlog::info("eval  {:>5} | loss {:.4f}{}{}", step, eval.loss,
               facts_.classifier ? std::string() : fmt::format(" | perplexity {:.3f}", perplexity),
               accuracy ? fmt::format(" | {} {:.4f}", facts_.accuracy_name, eval.accuracy) : std::string());
  std::vector<std::pair<std::string, double>> scalars = {{"eval/loss", eval.loss}};
  if (!facts_.classifier) scalars.emplace_back("eval/perplexity", perplexity);
  if (accuracy) scalars.emplace_back("eval/" + facts_.accuracy_name, eval.accuracy);
  if (sinks_.metrics) {
    JsonLine line;
    line.Add("step", step);
    for (const auto& [tag, value] : scalars) line.Add("eval_" + tag.substr(5), value);
    sinks_.metrics->Write(line);
  }
  if (sinks_.tensorboard) sinks_.tensorboard->WriteScalars(step, scalars);
}

void StepLogger::Record(const JsonLine& line) {
  if (sinks_.metrics) sinks_.metrics->Write(line);
}

void StepLogger::LogDone(const TrainResult& result, double elapsed_s) {
  if (result.losses.empty()) {
    spdlog::info("done: nothing to train (the checkpoint is at step {} = train.max_steps)", result.start_step);
    return;
  }
  const double tflops = facts_.flops_per_token * result.tokens_per_s / 1e12;
  // The evaluation's figure: perplexity for a language model, accuracy for a classifier.
  // No evaluation ran (no validation data): no eval part.
  const double eval = result.final_eval_loss;
  const std::string eval_part =
      std::isnan(eval)      ? std::string()
      : facts_.classifier ? fmt::format(" | eval {:.4f} (accuracy {:.4f})", eval, result.final_eval_accuracy)
                          : fmt::format(" | eval {:.4f} (perplexity {:.3f})", eval, Perplexity(eval));
  spdlog::info("done: steps {} to {} in {:.1f} s (start-up {:.1f} s) | loss {:.4f} -> {:.4f}{} | {} tok/s | {:.3f} TFLOPS",
               result.start_step + 1, facts_.max_steps, elapsed_s, result.startup_s, result.losses.front(),
               result.losses.back(), eval_part, FormatThousands(result.tokens_per_s), tflops);
  if (!sinks_.metrics) return;
  JsonLine line;
  line.Add("summary", true)
      .Add("steps", facts_.max_steps)
      .Add("start_step", result.start_step)
      .Add("first_loss", result.losses.front())
      .Add("final_loss", result.losses.back())
      .Add("final_eval_loss", result.final_eval_loss)
      .Add("final_eval_perplexity", Perplexity(result.final_eval_loss))
      .Add("tokens_per_s", result.tokens_per_s)
      .Add("tflops", tflops)
      .Add("packing_efficiency", result.packing_efficiency)
      .Add("elapsed_s", elapsed_s)
      .Add("startup_s", result.startup_s)
      .Add("startup_peak_rss_bytes", result.startup_peak_rss_bytes)
      .Add("peak_rss_bytes", result.peak_rss_bytes)
      .Add("params", facts_.params)
      .Add("device", facts_.device)
      .Add("threads", static_cast<int64_t>(facts_.threads));
  if (!result.accuracies.empty()) {
    line.Add("final_accuracy", result.accuracies.back()).Add("final_eval_accuracy", result.final_eval_accuracy);
  }
  if (result.model_data_bytes > 0) {  // chunk runs: this rank's chunks (ZeRO: the ones it owns), and the host pool
    line.Add("model_data_bytes", result.model_data_bytes)
        .Add("host_pool_bytes", result.host_pool_bytes)
        .Add("peak_host_pool_used_bytes", result.peak_host_pool_used_bytes);
  }
  sinks_.metrics->Write(line);
}

}  // namespace ps::trainer
