#include "models/recompute.h"

#include <ATen/Context.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/custom_class.h>

#include <mutex>

namespace ps::models {
namespace {

// Holds what backward needs that is not a tensor; kept alive by the autograd node.
struct RecomputeState : torch::CustomClassHolder {
  std::function<at::Tensor(const at::Tensor&)> fn;
  std::function<void()> before_recompute;
  at::Tensor rng_state;  // of the default generator of x's device, before forward
};

at::Generator DefaultGenerator(const at::Tensor& x) { return at::globalContext().defaultGenerator(x.device()); }

at::Tensor GetRngState(const at::Tensor& x) {
  auto gen = DefaultGenerator(x);
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

void SetRngState(const at::Tensor& x, const at::Tensor& state) {
  auto gen = DefaultGenerator(x);
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

struct CheckpointFunction : public torch::autograd::Function<CheckpointFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            c10::intrusive_ptr<RecomputeState> state) {
    state->rng_state = GetRngState(x);
    ctx->save_for_backward({x});
    ctx->saved_data["state"] = c10::IValue::make_capsule(state);
    at::NoGradGuard no_grad;
    return state->fn(x);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto state = c10::static_intrusive_pointer_cast<RecomputeState>(ctx->saved_data["state"].toCapsule());
    const at::Tensor x = ctx->get_saved_variables()[0].detach().requires_grad_(true);
    state->before_recompute();
    // Recompute with the forward's RNG state, then give the generator its state back.
    const at::Tensor rng_now = GetRngState(x);
    SetRngState(x, state->rng_state);
    at::Tensor y;
    {
      at::AutoGradMode enable_grad(true);
      y = state->fn(x);
    }
    SetRngState(x, rng_now);
    torch::autograd::backward({y}, {grads[0]});
    return {x.grad(), at::Tensor()};
  }
};

}  // namespace

at::Tensor RecomputedCall(const at::Tensor& x, std::function<at::Tensor(const at::Tensor&)> fn,
                            std::function<void()> before_recompute) {
  auto state = c10::make_intrusive<RecomputeState>();
  state->fn = std::move(fn);
  state->before_recompute = std::move(before_recompute);
  return CheckpointFunction::apply(x, state);
}

}  // namespace ps::models
