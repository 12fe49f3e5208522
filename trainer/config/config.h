// Config: everything one run reads, assembled from the libraries' typed configs.
// trainer/ owns the run-level sections (run, train, logging); each library owns its
// own struct (models::GptConfig, data::DataConfig, optim::*, chunkmem::ChunkConfig,
// comm::DistributedConfig). Defaults live in the struct definitions only; the
// field table in config_schema.h derives parsing, printing and docs from them.
#pragma once

#include <cstdint>
#include <string>

#include "chunkmem/chunk_config.h"
#include "comm/comm_config.h"
#include "data/data_config.h"
#include "models/gpt_config.h"
#include "models/lora_config.h"
#include "models/model_type.h"
#include "optim/optim_config.h"

namespace ps::trainer {

enum class DeviceKind { kAuto, kCpu, kCuda };

struct RunConfig {
  std::string name = "run";
  std::string output_dir = "runs/default";  // metrics.jsonl, config.resolved.yaml
  int64_t seed = 1234;                      // model init, data order, dropout
  int64_t threads = 0;                      // CPU intra-op threads; 0 = all cores
  DeviceKind device = DeviceKind::kAuto;    // auto: CUDA when available, else CPU
  // true: start afresh, never resuming; an earlier run's metrics, config and
  // checkpoints in output_dir are deleted first. false (default): an output_dir that
  // holds another run is an error unless this run resumes it (checkpoint.resume).
  bool overwrite = false;
};

struct CheckpointConfig {
  int64_t every_steps = 0;     // save every N optimizer steps; 0 = off
  double every_minutes = 0;    // save when this many minutes passed since the last save; 0 = off
  int64_t keep = 2;            // newest K complete checkpoints kept; older ones deleted after a newer one is complete
  std::string dir;             // empty = <run.output_dir>/checkpoints
  bool at_end = true;          // save after the last step
  std::string resume = "auto"; // auto | never | <path of a step_N folder>
  // Copy the state to host memory and write it in a background thread while training
  // goes on (when the host has room for the copy); false writes before the next step.
  bool async = true;
  // At the end of the run, write an HF folder of the model's architecture (config.json,
  // weights, tokenizer and generation files) to <run.output_dir>/hf/.
  bool export_hf = false;
  // The exported weights' dtype: auto (bf16 for model.type llama, else fp32) | bf16 | fp32.
  std::string export_dtype = "auto";
};

// The order of a step's micro-batches (docs/chunkmem.md, "Micro-batch order").
enum class AccumulationSchedule {
  kHorizontal,  // each micro-batch through the whole model, forward and backward, then the next
  kVertical,    // every micro-batch through a block before the next block; one backward
};

struct TrainConfig {
  int64_t micro_batch_size = 8;   // sequences per forward/backward, per rank
  int64_t global_batch_size = 8;  // sequences per optimizer step; accumulation is derived
  int64_t max_steps = 100;        // optimizer steps
  double grad_clip = 1.0;         // global L2 norm bound; 0 = off
  int64_t eval_every = 0;         // steps between evaluations; 0 = only at the end
  int64_t eval_steps = 10;        // micro-batches per evaluation
  AccumulationSchedule accumulation_schedule = AccumulationSchedule::kHorizontal;
};

struct LoggingConfig {
  std::string level = "info";     // trace | debug | info | warn | error
  int64_t log_every = 1;          // steps between console/metrics lines
  bool jsonl = true;              // write <output_dir>/metrics.jsonl
  // Time forward, backward and the optimizer step apart (forward_ms, backward_ms,
  // optimizer_ms in metrics.jsonl); on CUDA this synchronises the device between them.
  bool step_breakdown = false;
  // Write TensorBoard event files to <output_dir>/tb/.
  bool tensorboard = false;
};

struct Config {
  int64_t schema_version = 1;
  RunConfig run;
  models::ModelType model_type = models::ModelType::kGpt;  // model.type
  models::GptConfig model;  // the shape keys (model.*), shared by GPT, BERT and Llama
  models::BertKeys bert;    // model.* keys of BERT (intermediate_size: BERT and Llama)
  models::LlamaKeys llama;  // model.* keys of Llama only
  models::LoraConfig lora;  // lora.*: adapters on a frozen base (models/lora.h)
  data::DataConfig data;
  TrainConfig train;
  optim::OptimizerConfig optimizer;
  optim::LrScheduleConfig lr_schedule;
  optim::PrecisionConfig precision;
  chunkmem::ChunkConfig chunk;
  comm::DistributedConfig distributed;
  LoggingConfig logging;
  CheckpointConfig checkpoint;
};

const char* ToString(DeviceKind d);

}  // namespace ps::trainer
