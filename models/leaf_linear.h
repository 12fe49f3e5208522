// LeafLinear: y = x W^T + b whose autograd node saves the weight *leaf itself*.
//
// at::linear saves a transposed view of the weight for backward, which pins the
// weight's storage. Under the chunk runtime a parameter's data is re-pointed between
// forward and backward (set_data to a chunk slot, to empty, to a new slot after an
// eviction), so that view would keep an evicted chunk's old payload alive (and, with a
// device arena, its range busy). Saving the leaf keeps only the parameter object:
// backward reads whatever slot it points at then. Same math as at::linear; gradients
// agree with autograd's to rounding (tests/models/gpt_test.cc).
#pragma once

#include <ATen/core/Tensor.h>

namespace ps::models {

// x: [..., in], weight: [out, in] (a leaf), bias: [out] or undefined.
at::Tensor LeafLinear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);

}  // namespace ps::models
