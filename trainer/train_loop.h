// Train: the plain-LibTorch training loop (the baseline the chunk runtime must match).
// Builds the model, data samplers and AdamW from a Config, runs train.max_steps
// optimizer steps with gradient accumulation, LR schedule, global-norm clipping and
// periodic evaluation, and writes <run.output_dir>/metrics.jsonl. Single-threaded
// caller; LibTorch parallelises ops internally (run.threads).
#pragma once

#include <cstdint>
#include <vector>

#include "trainer/config.h"

namespace ps::trainer {

struct TrainResult {
  std::vector<double> losses;     // training loss of every step
  std::vector<double> lrs;        // learning rate of every step
  double final_eval_loss = 0.0;   // NaN when there is no evaluation data
  double tokens_per_s = 0.0;      // mean over steps after the first
};

// Throws ConfigError for inconsistent settings, c10::Error for bad data files, and
// std::runtime_error when the loss becomes non-finite.
TrainResult Train(const Config& config);

}  // namespace ps::trainer
