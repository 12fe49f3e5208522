// SlicedCrossEntropy: an LM head and its mean cross-entropy that never hold the whole
// [tokens, vocab] logits. With a 128k vocabulary the fp32 logits of one
// micro-batch are its largest activation (4 x 2048 tokens: 4.2 GB); here they exist one
// slice of `slice_tokens` tokens at a time, in forward and again in backward.
//
// Forward, per slice: logits = hidden_slice W^T (+ bias) in the compute dtype, cast to
// fp32, their logsumexp and the target's logit -> the summed loss. Saved for backward:
// hidden (in the compute dtype), the weight and bias leaves themselves (as LeafLinear
// does, so the chunk runtime may re-point their data in between: backward reads whatever
// they point at then), the targets, and the per-token logsumexp ([N] fp32). Backward,
// per slice: the logits recomputed, softmax - onehot scaled by grad / counted tokens in
// fp32, cast to the compute dtype, then grad_hidden = d W and grad_W += d^T hidden
// (accumulated in the weight's dtype). The weight's gradient reaches it through autograd
// like any other (its AccumulateGrad, hence the chunk runtime's post-accumulate hooks).
//
// Dtypes are those of at::linear then MeanCrossEntropy (block_passes.h): the compute
// dtype is autocast's where autocast is on for hidden's device (bf16 plain runs), else
// the weight's (chunk runs hold bf16 weights and need no autocast); the loss is fp32.
// Targets -100 are not counted; the mean is over counted tokens (0 with zero gradients
// when none is counted, where at::cross_entropy gives NaN). A slice holds about (element bytes + 8) bytes per logit at its
// peak (the compute-dtype logits, their fp32 copy and one fp32 temporary).
// Thread: any; backward runs on autograd's.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace ps::models {

// hidden [..., C]; weight [V, C]; bias [V] or undefined; targets [...] int64 with the
// leading shape of hidden (-100: not counted); slice_tokens > 0. Returns the mean
// cross-entropy (fp32 scalar). `correct` (optional): how many counted tokens the argmax
// of the logits predicts (int64 scalar, no gradient), found in the same pass.
at::Tensor SlicedCrossEntropy(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& bias,
                              const at::Tensor& targets, int64_t slice_tokens, at::Tensor* correct = nullptr);

}  // namespace ps::models
