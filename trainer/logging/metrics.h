// Metrics output: one JSON object per line (metrics.jsonl), the FLOPs formula,
// perplexity, and the console's progress line. MetricsWriter owns its file and writes
// every line with one checked write() (no buffering), so a killed run keeps what it
// logged; a line that cannot be written whole (disk full, file-size limit) is taken back
// (the file is cut to its last complete line) and the run stops with an error. Not
// thread-safe; the training loop calls it from one thread. The rest are pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "trainer/io/file_io.h"

namespace ps::trainer {

// A flat JSON object built key by key. Doubles are written in their shortest exact form
// (they read back bitwise); non-finite numbers as null.
class JsonLine {
 public:
  JsonLine& Add(const std::string& key, double value);
  JsonLine& Add(const std::string& key, int64_t value);
  JsonLine& Add(const std::string& key, const std::string& value);
  JsonLine& Add(const std::string& key, bool value);
  std::string str() const { return "{" + body_ + "}"; }
  // The numeric fields (double and int64 values) in the order added (TensorBoard).
  const std::vector<std::pair<std::string, double>>& numeric_fields() const { return numeric_fields_; }

 private:
  void Key(const std::string& key);
  std::string body_;
  std::vector<std::pair<std::string, double>> numeric_fields_;
};

class MetricsWriter {
 public:
  // Opens `path` for appending; throws std::runtime_error naming it on failure.
  explicit MetricsWriter(const std::string& path);
  // Throws std::runtime_error naming the file when the line cannot be written whole.
  void Write(const JsonLine& line);

 private:
  CheckedFile out_;
};

// Training FLOPs per token (forward + backward): 6 N + 12 L A T (PaLM appendix B),
// where N counts every parameter once, including the tied embedding, whose matmul
// as the LM head is real work; 12 L A T is attention scores and values, A the width of
// the queries (n_head x head width: n_embd unless a Llama sets head_dim). Of N, the
// `n_frozen` parameters (a LoRA run's base) count 4 each, not 6: forward and the
// gradient through them, no gradient for them.
double TrainingFlopsPerToken(int64_t n_params, int64_t n_frozen, int64_t n_layer, int64_t attention_width,
                             int64_t seq_len);

// exp(mean cross-entropy loss in nats per token): the number of tokens the model is, on
// average, as unsure between as a uniform guess would be. Infinite when it overflows,
// NaN for a NaN loss.
double Perplexity(double mean_loss);

// "45s", "1m32s", "2h05m", "3d04h" (rounded down; negative or non-finite: "?").
std::string FormatDuration(double seconds);
// An integer with thousands separators, rounded to nearest: 5400.4 -> "5,400".
std::string FormatThousands(double value);

// The figures of one logged step on the console.
struct StepLine {
  int64_t step = 0, max_steps = 0;
  double loss = 0, lr = 0, grad_norm = 0;
  double step_ms = 0, tokens_per_s = 0, tflops = 0;
  double eta_s = 0;  // time left at the recent pace (negative: unknown)
};

// "step 120/600 (20%) | loss 2.3100 | lr 3.000e-04 | norm 0.812 | 95 ms | 5,400 tok/s |
// 0.012 TFLOPS | ETA 1m32s". The percentage is rounded down (100% only at the end).
std::string FormatStepLine(const StepLine& s);

}  // namespace ps::trainer
