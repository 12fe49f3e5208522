#include "models/causal_lm.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

namespace ps::models {
namespace {

// Re-points each of `params` to its slice of `packed` along `dim` (in order).
void RepointTo(const std::vector<at::Tensor>& params, const at::Tensor& packed, int64_t dim, bool transposed) {
  int64_t offset = 0;
  for (at::Tensor p : params) {
    const int64_t rows = p.size(0);
    const at::Tensor slice = packed.narrow(dim, offset, rows);
    p.set_data(transposed ? slice.t() : slice);
    offset += rows;
  }
}

}  // namespace

at::Tensor PackWeights(const std::vector<at::Tensor>& weights) {
  TORCH_INTERNAL_ASSERT(!weights.empty());
  at::NoGradGuard no_grad;
  for (const at::Tensor& w : weights) {
    TORCH_INTERNAL_ASSERT(w.dim() == 2 && w.size(1) == weights[0].size(1) && w.device() == weights[0].device(),
                          "PackWeights: a weight of shape ", w.sizes(), " with one of ", weights[0].sizes());
  }
  if (weights[0].device().is_cpu()) {
    if (weights.size() == 1 && weights[0].t().is_contiguous()) return weights[0];  // laid out already
    std::vector<at::Tensor> columns;  // [in, out_i] each
    for (const at::Tensor& w : weights) columns.push_back(w.t());
    const at::Tensor packed = at::cat(columns, 1).contiguous();  // [in, sum out_i]
    RepointTo(weights, packed, 1, /*transposed=*/true);
    return packed.t();
  }
  if (weights.size() == 1 && weights[0].is_contiguous()) return weights[0];  // nothing to pack
  const at::Tensor packed = at::cat(weights, 0).contiguous();  // [sum out_i, in]
  RepointTo(weights, packed, 0, /*transposed=*/false);
  return packed;
}

at::Tensor PackBiases(const std::vector<at::Tensor>& biases) {
  if (biases.empty() || !biases[0].defined()) return {};
  at::NoGradGuard no_grad;
  const at::Tensor packed = at::cat(biases, 0);
  RepointTo(biases, packed, 0, /*transposed=*/false);
  return packed;
}

}  // namespace ps::models
