// The passes over blocks that every model on the block contract (layer_hooks.h) makes,
// shared by Gpt and Llama: block 0 embeds, blocks 1..n_layer transform, block
// n_layer + 1 is the final norm and LM head. Each block runs between the hooks'
// PreForward and PostForward; a model supplies its three pieces (BlockPasses).
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <vector>

#include "models/layer_hooks.h"
#include "models/packed_rows.h"

namespace ps::models {

struct BlockPasses {
  int n_layer = 0;
  // Activation checkpointing is on (the model's run_block recomputes); LossMany then
  // recomputes the head in backward too, one micro-batch at a time.
  bool recompute = false;
  // Both read `rows` (packed_rows.h): positions and the attention mask of packed rows;
  // a default PackedRows is an ordinary batch.
  std::function<at::Tensor(const at::Tensor& idx, const PackedRows& rows)> embed;  // block 0: [B, T] ids -> [B, T, C]
  std::function<at::Tensor(int block, const at::Tensor& x, const PackedRows& rows)> run_block;  // blocks 1..n_layer
  std::function<at::Tensor(const at::Tensor& x)> head;                // block n_layer + 1: logits
  // Block n_layer + 1 as a loss: the mean cross-entropy of x's logits against targets,
  // the logits never whole (sliced_head.h). Loss and LossMany use it, forward uses head.
  std::function<at::Tensor(const at::Tensor& x, const at::Tensor& targets)> head_loss;
};

// Logits [B, T, vocab] of `idx`, block by block (hooks may be null: no hooks).
at::Tensor ForwardBlocks(const BlockPasses& passes, const at::Tensor& idx, LayerHooks* hooks,
                         const PackedRows& rows = {});

// The mean cross-entropy of `idx` against `targets`, block by block as ForwardBlocks,
// the last block being `passes.head_loss`.
at::Tensor LossBlocks(const BlockPasses& passes, const at::Tensor& idx, const at::Tensor& targets, LayerHooks* hooks,
                      const PackedRows& rows = {});

// Mean next-token cross-entropy in fp32 of materialised logits; targets -100 are not
// counted (none counted: NaN, as at::cross_entropy; the models' sliced head gives 0).
// The reference of the sliced head (tests), and for callers holding logits.
at::Tensor MeanCrossEntropy(const at::Tensor& logits, const at::Tensor& targets);

// The losses of several micro-batches computed block-major (train.accumulation_schedule:
// vertical): each block runs once for every micro-batch, its outputs wrapped by
// PostForward after all ran (so their backward hooks come first in backward). Keeps only
// the block inputs of every micro-batch, so in training (grad mode on) it needs
// activation checkpointing (`passes.recompute`); c10::Error otherwise, or when idx and
// targets differ in count. `rows`: one per micro-batch, or empty (none packed).
std::vector<at::Tensor> LossManyBlockMajor(const BlockPasses& passes, const std::vector<at::Tensor>& idx,
                                           const std::vector<at::Tensor>& targets, bool training, LayerHooks* hooks,
                                           const std::vector<PackedRows>& rows = {});

}  // namespace ps::models
