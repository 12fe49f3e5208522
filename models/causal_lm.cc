#include "models/causal_lm.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

namespace ps::models {

void UseRowVectorLayout(const std::vector<at::Tensor>& weights) {
  at::NoGradGuard no_grad;
  for (at::Tensor w : weights) {
    TORCH_INTERNAL_ASSERT(w.dim() == 2, "UseRowVectorLayout: a weight of shape ", w.sizes());
    if (w.t().is_contiguous()) continue;  // laid out already
    w.set_data(w.t().contiguous().t());
  }
}

}  // namespace ps::models
