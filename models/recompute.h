// RecomputedCall: activation recompute for one block (config key model.activation_checkpointing;
// "checkpoint" elsewhere in this codebase means a saved training state, trainer/io/checkpoint.h).
//
// Forward runs `fn(x)` without recording a graph, keeping only `x`. Backward calls
// `before_recompute()` (a layer hook: the chunk runtime counts the moment and makes
// sure the block's parameters are bound), re-runs `fn` on `x` with the RNG state and
// the autocast state of the first run (same dropout masks, same dtypes; backward runs
// outside the plain engine's autocast), back-propagates the incoming gradient through
// the recomputed graph (parameter gradients accumulate as usual), and returns x's
// gradient. An `x` that needs no gradient is given one (a block of adapters behind a
// frozen embedding still trains). Thread: the autograd thread that runs backward.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>

namespace ps::models {

at::Tensor RecomputedCall(const at::Tensor& x, std::function<at::Tensor(const at::Tensor&)> fn,
                            std::function<void()> before_recompute);

}  // namespace ps::models
