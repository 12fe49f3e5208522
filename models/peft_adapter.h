// PEFT's LoRA adapter folder, as PeftModel.save_pretrained writes it and
// PeftModel.from_pretrained reads it:
//   adapter_config.json        peft_type LORA, task_type, r, lora_alpha, lora_dropout,
//                              target_modules, use_rslora, base_model_name_or_path, ...
//   adapter_model.safetensors  "base_model.model.<HF module path>.lora_A.weight" [r, in]
//                              and ".lora_B.weight" [out, r]
// Read for lora.init_from, written by ps_export. Tensors are held under this project's
// parameter names ("layers.0.self_attn.q_proj.lora_A.weight"); `hf_prefix` is what the
// HF model puts before the block names: "model." (Llama family) or "transformer." (GPT-2).
// Errors (c10::Error) name the file and the key.
#pragma once

#include <c10/core/ScalarType.h>

#include <string>

#include "models/lora_config.h"
#include "models/safetensors.h"

namespace ps::models {

struct PeftAdapter {
  LoraConfig lora;  // enabled, r, alpha, dropout, target_modules, use_rslora (init_from empty)
  std::string base_model_name_or_path;
  TensorMap weights;  // by this project's names; views of the mapped file
};

constexpr char kPeftConfigFile[] = "adapter_config.json";
constexpr char kPeftWeightsFile[] = "adapter_model.safetensors";

// Throws when a file is missing, peft_type is not LORA, a LoRA variant this project
// does not compute is on (DoRA, a rank or alpha pattern, biases), or a tensor's key is
// not "base_model.model.<hf_prefix>...lora_[AB].weight".
PeftAdapter ReadPeftAdapter(const std::string& folder, const std::string& hf_prefix);

// Writes `folder` (created; the two files replaced atomically) for adapters `weights`
// (this project's names, any device, written as fp32) of a `task_type` model
// ("CAUSAL_LM"). `fan_in_fan_out`: the base stores its weights [in, out] (GPT-2's Conv1D).
void WritePeftAdapter(const std::string& folder, const TensorMap& weights, const LoraConfig& lora,
                      const std::string& base_model_name_or_path, const std::string& hf_prefix,
                      bool fan_in_fan_out);

// Merges each adapter of `adapters` (this project's names: "<module>.lora_A.weight" and
// "<module>.lora_B.weight") into `base` (by this project's names; "<module>.weight"):
// W + scale * B A computed in fp32 and held in `dtype`, as PEFT's merge_and_unload.
// Entries of `adapters` that are not factors are ignored. Throws when an A lacks its B,
// or a module has no weight in `base` or one of another shape; `base` is then unchanged.
void MergeLoraInto(TensorMap& base, const TensorMap& adapters, double scale, at::ScalarType dtype);

}  // namespace ps::models
