// PEFT's LoRA adapter folder, as PeftModel.save_pretrained writes it and
// PeftModel.from_pretrained reads it:
//   adapter_config.json        peft_type LORA, task_type, r, lora_alpha, lora_dropout,
//                              target_modules, use_rslora, base_model_name_or_path, ...
//   adapter_model.safetensors  "base_model.model.<HF module path>.lora_A.weight" [r, in]
//                              and ".lora_B.weight" [out, r]
// Read for lora.init_from, written by ps_export. Tensors are held under this project's
// parameter names ("layers.0.self_attn.q_proj.lora_A.weight"); HfModulePaths says what the
// HF model puts before them. Errors (c10::Error) name the file and the key.
#pragma once

#include <c10/core/ScalarType.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "models/lora_config.h"
#include "models/safetensors.h"

namespace ps::models {

// Where the HF model puts this project's parameter names in its module paths: `prefix`
// before every name ("model." for the Llama family, "transformer." for GPT-2, "bert."),
// except names starting with one of `top_level` (BERT's heads "cls.", "classifier.",
// which sit at the top of BertFor*). Built from a prefix alone where there is none.
struct HfModulePaths {
  HfModulePaths(std::string p, std::vector<std::string> top = {})  // NOLINT: a prefix reads as its paths
      : prefix(std::move(p)), top_level(std::move(top)) {}
  HfModulePaths(const char* p) : HfModulePaths(std::string(p)) {}  // NOLINT
  std::string prefix;
  std::vector<std::string> top_level;
  std::string ToHf(const std::string& name) const;
  // The project's name of HF path `path`; nullopt when the path is not this model's.
  std::optional<std::string> FromHf(const std::string& path) const;
};

// What the adapter is for, as PEFT records it: task_type ("CAUSAL_LM", "SEQ_CLS"; ""
// writes null, as for a masked LM), and modules_to_save: modules trained and saved
// whole beside the adapters (a classification head: PEFT's ["classifier", "score"]).
struct PeftTask {
  std::string task_type = "CAUSAL_LM";
  std::vector<std::string> modules_to_save;
};

struct PeftAdapter {
  LoraConfig lora;  // enabled, r, alpha, dropout, target_modules, use_rslora (init_from empty)
  std::string base_model_name_or_path;
  PeftTask task;
  // By this project's names; views of the mapped file: the LoRA factors, and the whole
  // tensors of modules_to_save ("classifier.weight").
  TensorMap weights;
};

constexpr char kPeftConfigFile[] = "adapter_config.json";
constexpr char kPeftWeightsFile[] = "adapter_model.safetensors";

// Throws when a file is missing, peft_type is not LORA, a LoRA variant this project
// does not compute is on (DoRA, a rank or alpha pattern, biases), or a tensor's key is
// neither "base_model.model.<HF module path>.lora_[AB].weight" of this model nor a
// tensor of a module of modules_to_save.
PeftAdapter ReadPeftAdapter(const std::string& folder, const HfModulePaths& paths);

// Writes `folder` (created; the two files replaced atomically) for `weights` (this
// project's names, any device, written as fp32): LoRA factors, and whole tensors of the
// modules of task.modules_to_save (anything else throws). `fan_in_fan_out`: the base
// stores its weights [in, out] (GPT-2's Conv1D).
void WritePeftAdapter(const std::string& folder, const TensorMap& weights, const LoraConfig& lora,
                      const std::string& base_model_name_or_path, const HfModulePaths& paths, bool fan_in_fan_out,
                      const PeftTask& task = {});

// Merges each adapter of `adapters` (this project's names: "<module>.lora_A.weight" and
// "<module>.lora_B.weight") into `base` (by this project's names; "<module>.weight"):
// W + scale * B A computed in fp32 and held in `dtype`, as PEFT's merge_and_unload.
// Entries of `adapters` that are not factors are ignored. Throws when an A lacks its B
// or a B its A, or a module has no weight in `base` or one of another shape; `base` is
// then unchanged.
void MergeLoraInto(TensorMap& base, const TensorMap& adapters, double scale, at::ScalarType dtype);

}  // namespace ps::models
