// WrapForPreBackward: an identity autograd function placed on a block's output whose
// backward calls ChunkRuntime::PreBackward(block) before any gradient flows into the
// block, so its parameters are fetched again before they are needed.
#pragma once

#include <ATen/core/Tensor.h>

#include "chunkmem/runtime.h"

namespace ps::chunkmem {

// Returns `output` (sharing storage) with the pre-backward node attached; returns it
// unchanged when it does not require grad.
at::Tensor WrapForPreBackward(const at::Tensor& output, int block, ChunkRuntime& runtime);

}  // namespace ps::chunkmem
