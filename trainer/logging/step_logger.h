// StepLogger: the logging component of a run. Decides which steps it logs
// (logging.log_every, and always the first and the last step of the run) and writes each
// to the console, metrics.jsonl and TensorBoard (whichever sinks the run opened); keeps
// the throughput (steps after the first) and the ETA's pace; logs evaluations, records
// (resume, saves, stop, export) and the end-of-run summary. Training thread only.
#pragma once

#include <c10/core/Device.h>

#include <chrono>
#include <cstdint>
#include <string>

#include "trainer/config/config.h"
#include "trainer/engine/engine.h"
#include "trainer/engine/train_result.h"
#include "trainer/logging/metrics.h"
#include "trainer/logging/step_record.h"
#include "trainer/logging/tensorboard_writer.h"

namespace ps::trainer {

// Where the figures go; null: that sink is off (rank > 0, logging.jsonl: false, ...).
// Not owned.
struct LogSinks {
  MetricsWriter* metrics = nullptr;
  TensorBoardWriter* tensorboard = nullptr;
};

// The run's fixed figures the log lines show.
struct LogFacts {
  int64_t max_steps = 0;
  int64_t tokens_per_step = 0;    // global batch x sequence length
  double flops_per_token = 0;     // TrainingFlopsPerToken
  std::string accuracy_name;      // the model's ("mlm_accuracy", "accuracy"); empty: none
  bool classifier = false;        // its evaluation has an accuracy, not a perplexity
  int64_t params = 0;             // for the summary
  std::string device;             // for the summary
  int threads = 0;                // for the summary
};

struct EvalResult {
  double loss = 0.0;
  double accuracy = 0.0;  // NaN: the model counts none
};

class StepLogger {
 public:
  StepLogger(const LoggingConfig& config, LogFacts facts, LogSinks sinks);

  // Called after every step of this run (the first is `first_step`): logs it when due;
  // `engine` adds its fields to the metrics line.
  void MaybeLog(int64_t step, int64_t first_step, const StepRecord& record, int64_t tokens_seen,
                TrainingEngine& engine);
  void LogEval(const EvalResult& eval, int64_t step);
  // A line of its own in metrics.jsonl (resume, checkpoint and stop records); dropped
  // when metrics.jsonl is off.
  void Record(const JsonLine& line);
  // The "done" console line and the metrics summary.
  void LogDone(const TrainResult& result, double elapsed_s);

  // Tokens per second over the steps so far after the first (the first alone when it
  // was the only one); 0 before any.
  double tokens_per_s() const { return timed_s_ > 0 ? timed_tokens_ / timed_s_ : 0.0; }

 private:
  void Write(int64_t step, const StepRecord& record, int64_t tokens_seen, double eta_s, TrainingEngine& engine);

  LoggingConfig config_;
  LogFacts facts_;
  LogSinks sinks_;
  double timed_s_ = 0.0;
  int64_t timed_tokens_ = 0;
  std::chrono::steady_clock::time_point first_step_end_;  // the ETA's pace: wall time per step after the first
};

// The TensorBoard tag of a numeric field of a step's metrics line: grouped by concern
// (train/, perf/, precision/), engine fields (chunk counters) under engine/.
std::string TensorBoardTag(const std::string& key);

}  // namespace ps::trainer
