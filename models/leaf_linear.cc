#include "models/leaf_linear.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

namespace ps::models {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The shared backward: grads for x and the weight (and the bias when `with_bias`).
variable_list Backward(AutogradContext* ctx, const variable_list& grads, bool with_bias) {
  const auto saved = ctx->get_saved_variables();
  const at::Tensor& x = saved[0];
  const at::Tensor& weight = saved[1];  // the leaf: whatever data it points at now
  const at::Tensor& g = grads[0];
  at::Tensor grad_x, grad_w, grad_b;
  if (ctx->needs_input_grad(0)) grad_x = at::matmul(g, weight);
  const at::Tensor g2 = g.reshape({-1, g.size(-1)});
  if (ctx->needs_input_grad(1)) grad_w = g2.t().mm(x.reshape({-1, x.size(-1)}));
  if (!with_bias) return {grad_x, grad_w};
  if (ctx->needs_input_grad(2)) grad_b = g2.sum(0);
  return {grad_x, grad_w, grad_b};
}

class LeafLinearBias : public torch::autograd::Function<LeafLinearBias> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const at::Tensor& bias) {
    ctx->save_for_backward({x, weight});  // leaves are saved as themselves, not as views
    return at::linear(x, weight, bias);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) { return Backward(ctx, grads, true); }
};

class LeafLinearNoBias : public torch::autograd::Function<LeafLinearNoBias> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight) {
    ctx->save_for_backward({x, weight});
    return at::linear(x, weight);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) { return Backward(ctx, grads, false); }
};

}  // namespace

at::Tensor LeafLinear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  return bias.defined() ? LeafLinearBias::apply(x, weight, bias) : LeafLinearNoBias::apply(x, weight);
}

}  // namespace ps::models
