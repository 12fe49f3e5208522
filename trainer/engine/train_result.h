// TrainResult: what one Train() call reports (losses, throughput, chunk statistics);
// tests and tools read it. Plain data.
#pragma once

#include <cstdint>
#include <vector>

namespace ps::trainer {

struct TrainResult {
  std::vector<double> losses;     // training loss of every step this call ran
  std::vector<double> lrs;        // learning rate of every step this call ran
  int64_t start_step = 0;         // steps already done when this call began (a resumed checkpoint's step)
  int stop_signal = 0;            // the signal that stopped the run early (checkpoint written), 0 = none
  double final_eval_loss = 0.0;   // NaN when there is no evaluation data
  // BERT: the share of predictions right (mlm_accuracy over masked positions, or the
  // classifier's accuracy) of every step this call ran, and of the last evaluation
  // (NaN: none). Empty / NaN for GPT.
  std::vector<double> accuracies;
  double final_eval_accuracy = 0.0;
  double tokens_per_s = 0.0;      // mean over steps after the first
  // The share of input slots holding a token (not padding) in the batches this rank
  // trained on (1 for token windows; chat data: the packing efficiency). NaN: none.
  double packing_efficiency = 0.0;
  // Seconds from the start of Train() to the first step (data opened, output folder,
  // model built, parameters initialised or loaded, chunks placed, a checkpoint restored).
  double startup_s = 0.0;
  // Resident host memory (VmHWM): the most at the end of start-up, and the
  // most over the whole call. 0 where /proc/self/status cannot be read.
  int64_t startup_peak_rss_bytes = 0;
  int64_t peak_rss_bytes = 0;
  // Chunk runs only (chunk.enabled):
  int64_t peak_device_chunk_bytes = 0;  // highest chunk bytes on the device tier
  int64_t device_budget_bytes = 0;
  int64_t host_pool_bytes = 0;            // the host pool, reserved once at start
  int64_t peak_host_pool_used_bytes = 0;  // most of it in payloads at once
  int64_t compute_chunk_bytes = 0;      // all compute-dtype chunks (the kind that moves)
  int64_t model_data_bytes = 0;         // every chunk of every kind (params, grads, master, m, v) this rank holds
  int64_t evictions = 0;
  int64_t prefetch_hits = 0;
  int64_t skipped_steps = 0;            // fp16 overflows
  // Traced budget only (chunk.device_memory_bytes / CUDA without a fixed budget):
  int64_t traced_capacity_bytes = 0;    // chunks + non-model memory must fit this
  int64_t peak_non_model_bytes = 0;     // highest non-model bytes the probe saw
  int64_t peak_device_total_bytes = 0;  // after warm-up: chunk + non-model peaks, added, per moment
  int64_t min_chunk_budget_bytes = 0;   // lowest traced per-moment chunk budget
  std::vector<double> loss_scales;      // the loss scale of every step (1 without fp16)
  std::vector<bool> skipped;            // per step: skipped for a gradient overflow
  int adam_device_chunks = 0;           // chunks updated on the device at the last step
  int adam_host_chunks = 0;             // chunks updated by the CPU kernels at the last step
};

}  // namespace ps::trainer
