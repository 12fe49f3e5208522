// TrainableModel: what the training engines need of a model, whatever its architecture
// and task (GPT or Llama next-token prediction, BERT masked LM, BERT sequence classification):
// the loss of a batch through the layer hooks, its parameters by block, and the switches
// the chunk runtime sets. The engines hold one of these and never name GPT or BERT; the
// concrete models are made by trainable_models.h. A Batch: models/batch.h.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <string>
#include <vector>

#include "models/batch.h"
#include "models/block_parameter.h"
#include "models/layer_hooks.h"
#include "models/lora_config.h"

// Declared only: module()'s callers include <torch/nn/module.h> (a heavy header that
// this one, included across trainer/, does not pull in).
namespace torch::nn {
class Module;
}  // namespace torch::nn

namespace ps::models {

// The loss of a batch and, for models that predict labels, how many predictions were
// right (`correct`) out of how many counted (`counted`): int64 scalars on the loss's
// device, detached; undefined for GPT (its metric is the loss).
struct LossOutput {
  at::Tensor loss;
  at::Tensor correct, counted;
};

class TrainableModel {
 public:
  virtual ~TrainableModel() = default;

  virtual LossOutput Loss(const Batch& batch, LayerHooks* hooks = nullptr) = 0;
  // The mean loss over the batch's counted targets (CountedTargets); GPT and Llama give 0
  // with zero gradients when none is counted.
  // The losses of several micro-batches computed block-major (train.accumulation_schedule:
  // vertical; GptImpl::LossMany), packed rows included. Models without it throw c10::Error.
  virtual std::vector<LossOutput> LossMany(const std::vector<Batch>& batches, LayerHooks* hooks = nullptr);
  // All parameters in forward order, each once, with the blocks that use them.
  virtual std::vector<BlockParameter> BlockParameters() const = 0;
  virtual ParameterCounts CountParameters() const = 0;
  virtual int num_blocks() const = 0;
  // Weight leaves saved for backward instead of views (the chunk runtime needs it).
  virtual void set_save_weight_leaves(bool on) = 0;
  // chunk.cpu_embedding: embeddings computed on the host, the result sent to `device`.
  virtual void set_host_embedding(bool on, at::Device device, at::ScalarType dtype) = 0;
  // The module itself: train()/eval()/to().
  virtual torch::nn::Module& module() = 0;
  // Writes parameter `name`'s initial values for run seed `seed` into `values` (fp32,
  // contiguous, host; the parameter's shape): InitGptParameter / InitBertParameter. Any
  // thread; each call is independent of the others (models/param_init.h).
  virtual void InitParameter(const std::string& name, at::Tensor values, uint64_t seed) const = 0;
  // Attaches LoRA adapters (models/lora.h) to the Linear layers that config.target_modules
  // names (models/lora_config.h, LoraModuleNames) and freezes every other parameter
  // (requires_grad false), but for a BERT classifier's head, which trains whole; returns
  // the adapted modules' paths. Before an engine takes the model. Throws c10::Error for
  // a model without adapters or a target naming no module.
  virtual std::vector<std::string> AttachLora(const LoraConfig& config);
  // The name of the accuracy in metrics ("mlm_accuracy", "accuracy"); empty: none.
  virtual std::string accuracy_name() const { return ""; }
};

}  // namespace ps::models
