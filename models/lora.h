// Low-rank adapters (LoRA, Hu et al. 2021) on a model's Linear layers, computed as
// PEFT's LoraLayer does:
//   y = base(x) + scale * B(A(dropout(x))),   A [r, in], B [out, r],
//   scale = alpha / r, or alpha / sqrt(r) with use_rslora (rsLoRA).
// An adapter is two children of the Linear it adapts, "lora_A" and "lora_B" (LoraFactor
// modules of one `weight` each), so the model's parameter names are PEFT's without its
// prefix and adapter name: "layers.0.self_attn.q_proj.lora_A.weight". A model with
// adapters attached computes every adapted Linear through ApplyLinear; the base
// parameters are frozen (requires_grad false) by the caller (TrainableModel::AttachLora).
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <string>
#include <vector>

#include "models/lora_config.h"

namespace ps::models {

// One factor of an adapter. `scale` and `dropout` are the adapter's, kept on its B.
class LoraFactorImpl : public torch::nn::Module {
 public:
  LoraFactorImpl(int64_t rows, int64_t cols);  // weight [rows, cols], allocated, not written
  at::Tensor weight;
  double scale = 0.0;
  double dropout = 0.0;
};
TORCH_MODULE(LoraFactor);

// A Linear a model offers for adapters, under its module path ("layers.0.self_attn.q_proj").
struct NamedLinear {
  std::string path;
  torch::nn::Linear linear;
};

// Attaches an adapter to each of `linears` whose path ends in a module name of
// config.target_modules (or `default_targets` when that is empty); returns their paths.
// Throws c10::Error when an entry names no module (listing the names there are), or a
// Linear already has an adapter.
std::vector<std::string> AttachLora(const std::vector<NamedLinear>& linears, const LoraConfig& config,
                                    const std::vector<std::string>& default_targets);

// PEFT's initial values of adapter parameter `name` for run seed `run_seed`: A
// Kaiming-uniform (a = sqrt(5): U(-1/sqrt(in), 1/sqrt(in))), B zero. `values`: fp32,
// contiguous, host.
void InitLoraParameter(const std::string& name, at::Tensor values, uint64_t run_seed);

// y = x W^T + b of `m` by LeafLinear (`leaf`, the chunk runtime) or at::linear, plus its
// adapter's term when it has one.
at::Tensor ApplyLinear(torch::nn::Linear& m, const at::Tensor& x, bool leaf);

// W + scale * B A of an adapted Linear (fp32 values of the current weights); the weight
// itself when it has no adapter. For merged exports and sampling.
at::Tensor MergedWeight(torch::nn::Linear& m);

}  // namespace ps::models
