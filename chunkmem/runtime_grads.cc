// ChunkRuntime's gradient hooks: where each parameter's gradient goes when autograd
// has accumulated it (its last backward use in the micro-batch), and the step's
// gradient bookkeeping. The fp32 grad chunks' path is the GradSink's (grad_sink.h);
// with grads_in_compute_chunks the gradient overwrites the parameter's compute slot;
// with ZeRO it goes into its group's buffer (zero_groups.h).
// Called on the thread that runs backward (see runtime.h), never concurrently.
#include <ATen/core/Tensor.h>
#include <ATen/core/grad_mode.h>
#include <c10/util/Exception.h>

#include <algorithm>

#include "chunkmem/runtime.h"

namespace ps::chunkmem {

int64_t ChunkRuntime::GradChunkBytes(int chunk) const {
  return options_.grads_in_compute_chunks ? 0 : grads_->GradChunkBytes(chunk);
}

void ChunkRuntime::OnGradAccumulated(int index) {
  auto& param = params_[index].tensor;
  at::NoGradGuard no_grad;
  at::Tensor grad = param.grad();
  TORCH_INTERNAL_ASSERT(grad.defined(), "grad hook without a gradient for ", params_[index].name);
  if (zero()) {
    zero_groups_->AddGrad(index, grad);
  } else if (options_.grads_in_compute_chunks) {
    // The parameter's last backward use is done: its slot now holds its gradient.
    View(ChunkKind::kCompute, index).copy_(grad);
  } else {
    grads_->Add(index, grad);
  }
  param.mutable_grad() = at::Tensor();
  has_grad_[index] = true;
  if (states_[index] == TensorState::kCompute) Release(index, TensorState::kHoldAfterBwd);
  const int chunk = layout_.placements()[index].chunk_id;
  if (zero()) {
    zero_groups_->ReduceIfComplete(chunk);
  } else if (options_.grads_in_compute_chunks) {  // the slots are the gradients: final once all are in
    if (grads_->UsedParamsHave(chunk, has_grad_)) GradsFinal(chunk);
  } else {
    grads_->FlushIfComplete(chunk);
  }
}

void ChunkRuntime::GradsFinal(int chunk) {
  if (final_micro_batch_ && on_grads_final_) on_grads_final_(chunk);
}

void ChunkRuntime::AfterBackward() {
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (states_[i] == TensorState::kCompute) Release(static_cast<int>(i), TensorState::kHoldAfterBwd);
  }
  if (zero() && grads_->started()) zero_groups_->FinishBackward();
  grads_->FinishBackward();
}

void ChunkRuntime::ZeroGrads() {
  if (!options_.grads_in_compute_chunks) grads_->BeginStep(warmed_up());  // reused slots are overwritten
  std::fill(has_grad_.begin(), has_grad_.end(), false);
}

}  // namespace ps::chunkmem
