#include "chunkmem/pre_backward.h"

#include <ATen/core/ivalue.h>
#include <c10/util/Exception.h>
#include <torch/csrc/autograd/custom_function.h>

namespace ps::chunkmem {
namespace {

// The runtime a node calls back, and whether it still exists: a graph may outlive it
// (kept by the caller past the runtime's teardown); its backward must then fail
// cleanly instead of using freed memory.
struct RuntimeLink : torch::CustomClassHolder {
  RuntimeLink(ChunkRuntime* r, std::weak_ptr<const int> a) : runtime(r), alive(std::move(a)) {}
  ChunkRuntime* runtime;
  std::weak_ptr<const int> alive;
};

struct PreBackwardFunction : public torch::autograd::Function<PreBackwardFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, int64_t block,
                            c10::IValue link) {
    ctx->saved_data["block"] = block;
    ctx->saved_data["runtime"] = std::move(link);
    return x.detach();  // same storage; this node becomes its grad_fn
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto link = ctx->saved_data["runtime"].toCapsule();
    const auto* l = static_cast<const RuntimeLink*>(link.get());
    TORCH_CHECK(!l->alive.expired(), "chunkmem: backward through a graph whose chunk runtime is gone (the graph "
                "outlived the ChunkRuntime that bound its parameters)");
    l->runtime->PreBackward(static_cast<int>(ctx->saved_data["block"].toInt()));
    return {grads[0], at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor WrapForPreBackward(const at::Tensor& output, int block, ChunkRuntime& runtime) {
  if (!output.requires_grad()) return output;
  auto link = c10::make_intrusive<RuntimeLink>(&runtime, runtime.lifetime());
  return PreBackwardFunction::apply(output, static_cast<int64_t>(block), c10::IValue::make_capsule(std::move(link)));
}

}  // namespace ps::chunkmem
