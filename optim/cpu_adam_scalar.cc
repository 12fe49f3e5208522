// The scalar reference variant of the CPU Adam kernels: the element loop of the spec.
#include "optim/cpu_adam_element.h"

namespace ps::optim::internal {

void AdamScalar(const AdamSpan& span, const AdamHyper& hyper) { AdamElements(span, hyper, 0, span.numel); }

double SumSquaresScalar(const void* grad, ElemType type, int64_t numel) {
  return SumSquaresElements(grad, type, 0, numel);
}

}  // namespace ps::optim::internal
