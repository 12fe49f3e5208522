// ChunkLayerHooks: connects the model's layer-hook seam (models/layer_hooks.h) to the
// chunk runtime. Lives in trainer/ because chunkmem must not know about models.
// Pre-forward fetches a block's parameters; post-forward releases them and, when the
// output takes part in backward, wraps it so backward fetches them again first.
#pragma once

#include "chunkmem/pre_backward.h"
#include "chunkmem/runtime.h"
#include "models/layer_hooks.h"

namespace ps::trainer {

class ChunkLayerHooks final : public models::LayerHooks {
 public:
  explicit ChunkLayerHooks(chunkmem::ChunkRuntime& runtime) : runtime_(runtime) {}
  void PreForward(int block_id) override { runtime_.PreForward(block_id); }
  at::Tensor PostForward(int block_id, at::Tensor output) override {
    runtime_.PostForward(block_id);
    return chunkmem::WrapForPreBackward(output, block_id, runtime_);
  }

 private:
  chunkmem::ChunkRuntime& runtime_;
};

}  // namespace ps::trainer
