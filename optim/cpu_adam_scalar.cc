// The scalar reference variant of the CPU Adam kernels: the element loop of the spec.
#include "optim/cpu_adam_element.h"

namespace ps::optim::internal {

void AdamScalar(const AdamSpan& span, const AdamHyper& hyper) {
  if (span.state_type == ElemType::kInt8) {
    AdamInt8Blocks(
        span, hyper, [](const AdamSpan& f, const AdamHyper& h) { AdamElements(f, h, 0, f.numel); }, DequantizeBlock,
        QuantizeBlock);
    return;
  }
  AdamElements(span, hyper, 0, span.numel);
}

double SumSquaresScalar(const void* grad, ElemType type, int64_t numel) {
  return SumSquaresElements(grad, type, 0, numel);
}

}  // namespace ps::optim::internal
