// The passes over blocks that every model on the block contract (layer_hooks.h) makes,
// shared by Gpt and Llama: block 0 embeds, blocks 1..n_layer transform, block
// n_layer + 1 is the final norm and LM head. Each block runs between the hooks'
// PreForward and PostForward; a model supplies its three pieces (BlockPasses).
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <vector>

#include "models/layer_hooks.h"

namespace ps::models {

struct BlockPasses {
  int n_layer = 0;
  // Activation checkpointing is on (the model's run_block recomputes); LossMany then
  // recomputes the head in backward too, one micro-batch at a time.
  bool recompute = false;
  std::function<at::Tensor(const at::Tensor& idx)> embed;             // block 0: [B, T] ids -> [B, T, C]
  std::function<at::Tensor(int block, const at::Tensor& x)> run_block;  // blocks 1..n_layer
  std::function<at::Tensor(const at::Tensor& x)> head;                // block n_layer + 1: logits
};

// Logits [B, T, vocab] of `idx`, block by block (hooks may be null: no hooks).
at::Tensor ForwardBlocks(const BlockPasses& passes, const at::Tensor& idx, LayerHooks* hooks);

// Mean next-token cross-entropy in fp32; targets -100 are not counted.
at::Tensor MeanCrossEntropy(const at::Tensor& logits, const at::Tensor& targets);

// The losses of several micro-batches computed block-major (train.accumulation_schedule:
// vertical): each block runs once for every micro-batch, its outputs wrapped by
// PostForward after all ran (so their backward hooks come first in backward). Keeps only
// the block inputs of every micro-batch, so in training (grad mode on) it needs
// activation checkpointing (`passes.recompute`); c10::Error otherwise, or when idx and
// targets differ in count.
std::vector<at::Tensor> LossManyBlockMajor(const BlockPasses& passes, const std::vector<at::Tensor>& idx,
                                           const std::vector<at::Tensor>& targets, bool training, LayerHooks* hooks);

}  // namespace ps::models
