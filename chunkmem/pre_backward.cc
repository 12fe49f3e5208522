#include "chunkmem/pre_backward.h"

#include <torch/csrc/autograd/custom_function.h>

namespace ps::chunkmem {
namespace {

struct PreBackwardFunction : public torch::autograd::Function<PreBackwardFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, int64_t block,
                            int64_t runtime_address) {
    ctx->saved_data["block"] = block;
    ctx->saved_data["runtime"] = runtime_address;
    return x.detach();  // same storage; this node becomes its grad_fn
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* runtime = reinterpret_cast<ChunkRuntime*>(ctx->saved_data["runtime"].toInt());
    runtime->PreBackward(static_cast<int>(ctx->saved_data["block"].toInt()));
    return {grads[0], at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor WrapForPreBackward(const at::Tensor& output, int block, ChunkRuntime& runtime) {
  if (!output.requires_grad()) return output;
  return PreBackwardFunction::apply(output, static_cast<int64_t>(block),
                                    reinterpret_cast<int64_t>(&runtime));
}

}  // namespace ps::chunkmem
