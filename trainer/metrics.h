// Metrics output: one JSON object per line (metrics.jsonl) and the FLOPs formula.
// MetricsWriter owns its file and writes every line with one checked write() (no
// buffering), so a killed run keeps what it logged and a full disk stops the run with
// an error instead of a cut line. Not thread-safe; the training loop calls it from one thread.
#pragma once

#include <cstdint>
#include <string>

#include "trainer/file_io.h"

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

 private:
  void Key(const std::string& key);
  std::string body_;
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

// Training FLOPs per token (forward + backward): 6 N + 12 L C T (PaLM appendix B),
// where N counts every parameter once, including the tied embedding, whose matmul
// as the LM head is real work; 12 L C T is attention scores and values.
double TrainingFlopsPerToken(int64_t n_params, int64_t n_layer, int64_t n_embd, int64_t seq_len);

}  // namespace ps::trainer
