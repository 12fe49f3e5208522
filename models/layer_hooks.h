// LayerHooks: the seam between model code and a memory manager (chunkmem runtime).
//
// Models call these at block boundaries; the default implementation does nothing,
// which is plain LibTorch training. Block ids are dense: 0 = embeddings,
// 1..n_layer = transformer blocks, n_layer + 1 = final norm + LM head. A hook
// object is owned by the caller of forward() and must outlive the backward pass.
// Called on the thread that runs forward (and, for PreBackward, autograd's thread).
#pragma once

#include <ATen/core/Tensor.h>

namespace ps::models {

class LayerHooks {
 public:
  virtual ~LayerHooks() = default;

  // Before block `block_id` runs forward (also when it is recomputed in backward).
  virtual void PreForward(int block_id) {}

  // After block `block_id` ran forward. Returns the block output; an implementation
  // may wrap it in an autograd function whose backward announces "pre-backward" of
  // this block before gradients flow into it.
  virtual at::Tensor PostForward(int block_id, at::Tensor output) { return output; }
};

}  // namespace ps::models
