#include "models/batch.h"

#include <ATen/ops/ne.h>
#include <ATen/ops/sum.h>

namespace ps::models {
namespace {

at::Tensor MoveIfDefined(const at::Tensor& t, at::Device device) { return t.defined() ? t.to(device) : t; }

}  // namespace

Batch Batch::To(at::Device device) const {
  return {MoveIfDefined(input_ids, device),      MoveIfDefined(labels, device),
          MoveIfDefined(token_type_ids, device), MoveIfDefined(attention_mask, device),
          MoveIfDefined(position_ids, device),   MoveIfDefined(segment_ids, device)};
}

int64_t CountedTargets(const Batch& batch) { return batch.labels.ne(-100).sum().item<int64_t>(); }

}  // namespace ps::models
