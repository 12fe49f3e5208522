// A LoRA run's adapters in PEFT's format (models/peft_adapter.h): started from
// lora.init_from, and written out as an adapter folder (ps_export) that
// PeftModel.from_pretrained loads over the base model.
#pragma once

#include <c10/core/ScalarType.h>

#include <string>
#include <vector>

#include "models/peft_adapter.h"
#include "models/safetensors.h"
#include "trainer/config/config.h"
#include "trainer/engine/engine.h"
#include "trainer/io/hf_io.h"

namespace ps::trainer {

// Where the HF model of `config` puts this project's names in its module paths, and so in
// PEFT's keys: after "model." (Llama family), "transformer." (GPT-2), "bert." (BERT, its
// heads "cls." and "classifier." at the top).
models::HfModulePaths HfModulePathsOf(const Config& config);

// PEFT's task of the run: CAUSAL_LM (GPT-2, Llama family), SEQ_CLS with the classifier
// in modules_to_save (a BERT classifier: the head trains whole, as PEFT trains it), none
// for BERT's masked LM.
models::PeftTask PeftTaskOf(const Config& config);

// lora.init_from: writes the adapter folder's factors into `engine` (the base kept; Adam
// state empty). Throws ConfigError naming lora.init_from and the file when the folder's
// r, lora_alpha or use_rslora differ from this run's lora.* keys, or its factors are not
// exactly this run's adapters.
void LoadInitialAdapters(TrainingEngine& engine, const Config& config);

// The adapter factors of `params` (ps names: IsLoraParameter) and the tensors that train
// whole beside them (TrainsWholeWithLora), written into `folder` as
// PEFT's two files for base model `base_model` (its HF name or path); returns their names.
std::vector<std::string> WriteAdapterFiles(const models::TensorMap& params, const Config& config,
                                           const std::string& folder, const std::string& base_model);

// The base model's weights (ps names) with every adapter of `adapters` merged in:
// W + scale * B A computed in fp32 and held in `merged_dtype` (the export's dtype: no
// fp32 copy of a bf16 export's merged weights), as PEFT's merge_and_unload. The base is
// model.init_from's (memory-mapped; the unadapted tensors stay views of the files), or,
// without one, drawn from run.seed as the run drew it.
models::TensorMap MergedParams(const models::TensorMap& adapters, const Config& config,
                               at::ScalarType merged_dtype = at::kFloat);

struct LoraExportOptions {
  bool merge = false;       // the merged model (an HF folder of the architecture), not the adapter
  std::string base_model;   // the adapter's base_model_name_or_path; empty: model.init_from
  bool replace = false;     // an earlier export at the destination may be replaced
  int64_t max_shard_bytes = 5'000'000'000;
  std::string export_dtype; // merged: replaces checkpoint.export_dtype when not empty
};

// ps_export of a LoRA run's checkpoint folder (a step_N folder, or a folder of them:
// its newest): a PEFT adapter folder (adapter_config.json, adapter_model.safetensors, the
// run's tokenizer files), or with options.merge the merged model as ExportHfFolder
// writes one. The folder appears complete or not at all (ExportFolder).
HfExportReport ExportLoraCheckpoint(const std::string& checkpoint, const std::string& out_dir,
                                    const LoraExportOptions& options);

// checkpoint.export_hf of a LoRA run: the adapter folder at <run.output_dir>/hf, of the
// adapters in `params` (TrainingEngine::GatherTrainableParams; other entries ignored).
HfExportReport ExportLoraAtEnd(const models::TensorMap& params, const Config& config);

}  // namespace ps::trainer
