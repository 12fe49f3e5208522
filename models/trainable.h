// TrainableModel: what the training engines need of a model, whatever its architecture
// and task (GPT or Llama next-token prediction, BERT masked LM, BERT sequence classification):
// the loss of a batch through the layer hooks, its parameters by block, and the switches
// the chunk runtime sets. The engines hold one of these and never name GPT or BERT.
//
// A Batch carries what any of them reads; fields a model does not use stay undefined.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <torch/nn/module.h>

#include <memory>
#include <string>
#include <vector>

#include "models/bert.h"
#include "models/gpt.h"
#include "models/layer_hooks.h"
#include "models/llama.h"

namespace ps::models {

struct Batch {
  at::Tensor input_ids;       // [B, T] int64
  // GPT/Llama: next tokens [B, T], -100 where nothing is predicted (chat data: prompts,
  // padding); BERT MLM: original ids at masked positions, -100 elsewhere [B, T];
  // classification: labels [B].
  at::Tensor labels;
  at::Tensor token_type_ids;  // [B, T] int64 or undefined (one segment)
  // [B, T] 1 = token, 0 = padding, or undefined (no padding). BERT reads it; GPT and
  // Llama do not need it: their padding is at the end of a row (or of its own segment
  // when packed), behind causal attention, with labels -100.
  at::Tensor attention_mask;
  // Packed rows (data.packing; packed_rows.h), GPT and Llama only (BERT refuses them):
  at::Tensor position_ids;    // [B, T] int64 restarting per example, or undefined (0..T-1)
  at::Tensor segment_ids;     // [B, T] int64 example of each token (padding its own), or undefined (one per row)

  Batch To(at::Device device) const;  // undefined fields stay undefined
};

// The targets a next-token or MLM batch's loss averages over: labels other than -100
// (classification: every label). The trainer weights micro-batches by it so a global
// batch's loss is the mean over all of its counted targets. Reads labels (a host sync
// when they are on a device).
int64_t CountedTargets(const Batch& batch);

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
  // The name of the accuracy in metrics ("mlm_accuracy", "accuracy"); empty: none.
  virtual std::string accuracy_name() const { return ""; }
};

// The models may be built initialised or not (kUninitialised; the engines fill them).
std::unique_ptr<TrainableModel> MakeTrainableGpt(Gpt model);
// A Llama-family decoder (next-token prediction, as GPT; LossMany included).
std::unique_ptr<TrainableModel> MakeTrainableLlama(Llama model);
// BERT with its MLM head (labels: -100 where nothing is predicted).
std::unique_ptr<TrainableModel> MakeTrainableBertMlm(Bert model);
// BERT with its sequence-classification head (config.num_labels > 0; labels [B]).
std::unique_ptr<TrainableModel> MakeTrainableBertClassifier(Bert model);

}  // namespace ps::models
