#include "models/recompute.h"

#include <ATen/Context.h>
#include <ATen/autocast_mode.h>
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
  // Autocast of x's device type in forward (the plain engine's bf16): backward runs
  // outside it (and on CUDA on autograd's thread), so the recompute restores it.
  bool autocast = false;
  at::ScalarType autocast_dtype = at::kFloat;
};

// Sets the autocast state of `type` for its lifetime, then puts the previous one back;
// casts cached while it enabled autocast are dropped (they would outlive the weights'
// next update otherwise: the cache is per thread and lives until cleared).
class AutocastAs {
 public:
  AutocastAs(at::DeviceType type, bool enabled, at::ScalarType dtype)
      : type_(type), was_enabled_(at::autocast::is_autocast_enabled(type)),
        was_dtype_(at::autocast::get_autocast_dtype(type)) {
    at::autocast::set_autocast_enabled(type_, enabled);
    at::autocast::set_autocast_dtype(type_, dtype);
  }
  ~AutocastAs() {
    const bool enabled_here = at::autocast::is_autocast_enabled(type_);
    at::autocast::set_autocast_enabled(type_, was_enabled_);
    at::autocast::set_autocast_dtype(type_, was_dtype_);
    if (enabled_here && !was_enabled_) at::autocast::clear_cache();
  }
  AutocastAs(const AutocastAs&) = delete;
  AutocastAs& operator=(const AutocastAs&) = delete;

 private:
  at::DeviceType type_;
  bool was_enabled_;
  at::ScalarType was_dtype_;
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
    state->autocast = at::autocast::is_autocast_enabled(x.device().type());
    state->autocast_dtype = at::autocast::get_autocast_dtype(x.device().type());
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
      AutocastAs autocast(x.device().type(), state->autocast, state->autocast_dtype);  // as in forward
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
  // An input without a gradient (a frozen embedding's output: LoRA) would leave the
  // node out of the graph, and the parameters inside `fn` without theirs.
  if (at::GradMode::is_enabled() && !x.requires_grad()) {
    return CheckpointFunction::apply(x.detach().requires_grad_(true), state);
  }
  return CheckpointFunction::apply(x, state);
}

}  // namespace ps::models
