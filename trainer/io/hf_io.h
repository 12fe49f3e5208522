// HF folders of a run (GPT-2, BERT, Llama family): the initial weights of
// model.init_from, and the export of parameters (checkpoint.export_hf at the end of a
// run; ps_export from a checkpoint) as a folder `transformers` loads: config.json, the
// weights in checkpoint.export_dtype (sharded above 5 GB), the run's tokenizer files and
// the source's generation_config.json. The trainer never tokenizes, so it copies the
// tokenizer's files by name rather than loading them.
#pragma once

#include <ATen/core/ScalarType.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "models/safetensors.h"
#include "trainer/config/config.h"
#include "trainer/engine/engine.h"

namespace ps::trainer {

// model.init_from's weights by this run's parameter names, memory-mapped (read when
// loaded, one tensor at a time: no full copy of the model on the host). Read before the
// engine is built, so the engine skips the random init of every parameter in `params`.
// A folder that does not hold the model's weights (a missing shard or tensor, a wrong
// shape or dtype) is a ConfigError naming the file and the tensor.
struct InitialWeights {
  models::TensorMap params;
  std::vector<std::string> missing;  // BERT heads the folder lacks: they keep the random init
  double read_s = 0;
};
InitialWeights ReadInitialWeights(const Config& config);

// Starts `engine` from `weights`: the parameters in it, and the engine's random init of
// the missing ones; Adam moments zero, step 0.
void LoadInitialWeights(TrainingEngine& engine, const Config& config, InitialWeights weights);

// Where the run's tokenizer is: data.tokenizer, else model.init_from when it holds
// tokenizer files, else "" (a byte-level or pre-tokenized run).
std::string TokenizerSource(const Config& config);

// The tokenizer files of `source` (a tokenizer file, or a folder) that an HF folder
// carries: tokenizer.json, vocab.json, merges.txt, vocab.txt, tokenizer_config.json,
// special_tokens_map.json, added_tokens.json, tokenizer.model, chat_template.jinja, as
// far as they exist. Paths.
std::vector<std::string> TokenizerFiles(const std::string& source);

struct HfExportReport {
  std::string folder;
  std::vector<std::string> files;  // names in the folder
  int64_t bytes = 0;
  double seconds = 0;
};

// The file an export writes into its folder, naming what wrote it: a folder holding it
// is one this project may replace.
constexpr char kExportMarkerFile[] = ".ps_train_export";

// Where an export to `out_dir` may go: nowhere yet; or, with `replace`, a folder this
// project exported before (it holds kExportMarkerFile). Never a file, a folder without
// the marker (a user's), a folder holding checkpoints, nor one that is, holds or lies
// in any of `protected_paths` (the checkpoint exported, the run's checkpoint.dir).
// Throws ConfigError starting with `what` (the option or key that named `out_dir`).
void CheckExportDestination(const std::string& out_dir, bool replace, const std::vector<std::string>& protected_paths,
                            const std::string& what);

// The dtype checkpoint.export_dtype names: auto = bf16 for model.type llama, else fp32.
at::ScalarType ExportDtype(const Config& config);

// Writes `params` (ps names, fp32 masters) of a model `config` describes to `out_dir`
// as an HF folder of its architecture (GPT2LMHeadModel, BertForMaskedLM, or the Llama
// family's: models/hf_llama_export.h) in ExportDtype(config), with the tokenizer files
// of TokenizerSource(config), model.init_from's generation_config.json and the marker. Written into a fresh hidden folder beside `out_dir` and swapped in (one
// atomic exchange where the file system has it), so `out_dir` is either the old folder
// or the complete new one. CheckExportDestination(out_dir, replace, protected_paths)
// first. Throws naming the path.
HfExportReport ExportHfFolder(const models::TensorMap& params, const Config& config, const std::string& out_dir,
                              bool replace, const std::vector<std::string>& protected_paths,
                              int64_t max_shard_bytes = 5'000'000'000);

// How ExportHfFolder writes any export folder (the destination checked, a fresh hidden
// folder written and swapped in, the run's tokenizer files, the marker), with the
// model's own files written by `write_files` into the folder it is given (returning
// their names); model.init_from's generation_config.json copied when
// `generation_config`. LoRA's adapter folder is one (trainer/io/lora_io.h).
using ExportFilesFn = std::function<std::vector<std::string>(const std::string& folder)>;
HfExportReport ExportFolder(const Config& config, const std::string& out_dir, bool replace,
                            const std::vector<std::string>& protected_paths, const ExportFilesFn& write_files,
                            bool generation_config);

// <run.output_dir>/hf: where checkpoint.export_hf writes.
std::string HfExportFolder(const Config& config);

// `path` when it is a step_N checkpoint (it has a state.json), else the newest complete
// checkpoint in the folder `path`; throws naming `path` when it is neither.
std::string ResolveCheckpointFolder(const std::string& path);

// ps_export: the parameters and config of the checkpoint folder `checkpoint` (a step_N
// folder, or a folder of them: its newest), verified, exported as above; the checkpoint
// and the folder holding it are protected. `export_dtype` (auto, bf16, fp32) replaces
// the saved checkpoint.export_dtype when not empty.
HfExportReport ExportCheckpoint(const std::string& checkpoint, const std::string& out_dir, bool replace,
                                int64_t max_shard_bytes = 5'000'000'000, const std::string& export_dtype = "");

// checkpoint.export_hf: <run.output_dir>/hf/ from the checkpoint just written at the end
// (`final_checkpoint`, read back from disk: no second copy of the state in memory), or
// from the engine's parameters when there is none ("").
HfExportReport ExportAtEnd(TrainingEngine& engine, const Config& config, const std::string& final_checkpoint);

// The Config a checkpoint was saved with (its resolved YAML); model.init_from is kept as
// a name but its folder is not read again (it may be gone).
Config ConfigOfCheckpoint(const std::string& config_yaml, const std::string& checkpoint_path);

}  // namespace ps::trainer
