#include "models/sliced_head.h"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <c10/core/DispatchKeySet.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/autograd.h>

#include <algorithm>
#include <functional>

namespace ps::models {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr int64_t kIgnored = -100;

void ForEachSlice(int64_t tokens, int64_t slice_tokens, const std::function<void(int64_t, int64_t)>& fn) {
  for (int64_t start = 0; start < tokens; start += slice_tokens) fn(start, std::min(slice_tokens, tokens - start));
}

// One slice's logits in fp32: [n, C] x [V, C]^T (+ bias) in the compute dtype of
// hidden_c, then cast (the compute-dtype logits are freed at once when they differ).
at::Tensor SliceLogits(const at::Tensor& hidden_c, const at::Tensor& weight_c, const at::Tensor& bias_c) {
  return at::linear(hidden_c, weight_c, bias_c).to(at::kFloat);
}

// Row-wise logsumexp of fp32 logits [n, V] with one [n, V] temporary (at::logsumexp
// makes two).
at::Tensor LogSumExp(const at::Tensor& z) {
  const at::Tensor m = z.amax(1, /*keepdim=*/true);
  return at::sub(z, m).exp_().sum(1).log_().add_(m.squeeze(1));
}

class SlicedCrossEntropyFunction : public torch::autograd::Function<SlicedCrossEntropyFunction> {
 public:
  // Returns {loss, correct}; `compute` is the dtype the logits are computed in; `bias`
  // without elements: none (an undefined tensor cannot be an input here).
  static variable_list forward(AutogradContext* ctx, const at::Tensor& hidden, const at::Tensor& weight,
                               const at::Tensor& bias, const at::Tensor& targets, int64_t slice_tokens,
                               int64_t compute, bool want_correct) {
    // The casts are explicit here: autocast must not decide them a second time.
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const auto dtype = static_cast<at::ScalarType>(compute);
    const at::Tensor hidden_c = hidden.to(dtype);
    const at::Tensor weight_c = weight.to(dtype);
    const at::Tensor bias_c = bias.numel() > 0 ? bias.to(dtype) : at::Tensor();
    const auto fp32 = hidden.options().dtype(at::kFloat);
    at::Tensor lse = at::empty({hidden.size(0)}, fp32);  // [N]
    at::Tensor loss_sum = at::zeros({}, fp32);
    at::Tensor correct = at::zeros({}, targets.options());
    ForEachSlice(hidden.size(0), slice_tokens, [&](int64_t start, int64_t n) {
      const at::Tensor z = SliceLogits(hidden_c.narrow(0, start, n), weight_c, bias_c);  // [n, V] fp32
      const at::Tensor t = targets.narrow(0, start, n);
      const at::Tensor valid = t.ne(kIgnored);
      const at::Tensor l = LogSumExp(z);
      lse.narrow(0, start, n).copy_(l);
      const at::Tensor picked = z.gather(1, t.masked_fill(~valid, 0).unsqueeze(1)).squeeze(1);
      loss_sum.add_(at::where(valid, l - picked, 0.0).sum());
      if (want_correct) correct.add_(z.argmax(1).eq(t).logical_and_(valid).sum());
    });
    // No counted target (a micro-batch of prompts only): 0, not at::cross_entropy's 0 / 0 = NaN,
    // so that one such micro-batch does not poison a step; its gradient is zero too.
    const at::Tensor loss = loss_sum / targets.ne(kIgnored).sum().clamp_min(1);
    ctx->save_for_backward({hidden_c, weight, bias, targets, lse});
    ctx->saved_data["slice_tokens"] = slice_tokens;
    ctx->saved_data["compute"] = compute;
    ctx->mark_non_differentiable({correct});
    return {loss, correct};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& hidden_c = saved[0];
    const at::Tensor& weight = saved[1];  // the leaf: whatever data it points at now
    const at::Tensor& bias = saved[2];
    const at::Tensor& targets = saved[3];
    const at::Tensor& lse = saved[4];
    const int64_t slice_tokens = ctx->saved_data["slice_tokens"].toInt();
    const auto dtype = static_cast<at::ScalarType>(ctx->saved_data["compute"].toInt());
    const at::Tensor weight_c = weight.to(dtype);
    const at::Tensor bias_c = bias.numel() > 0 ? bias.to(dtype) : at::Tensor();
    // d loss / d logit = grad * (softmax - onehot) / counted, on counted rows only.
    const at::Tensor scale = grads[0].to(at::kFloat) / targets.ne(kIgnored).sum().clamp_min(1);
    const bool need_h = ctx->needs_input_grad(0), need_w = ctx->needs_input_grad(1);
    const bool need_b = bias.numel() > 0 && ctx->needs_input_grad(2);
    at::Tensor grad_h = need_h ? at::empty_like(hidden_c) : at::Tensor();
    at::Tensor grad_w = need_w ? at::zeros_like(weight) : at::Tensor();  // summed in the weight's dtype
    at::Tensor grad_b = need_b ? at::zeros(bias.sizes(), bias.options().dtype(at::kFloat)) : at::Tensor();
    ForEachSlice(hidden_c.size(0), slice_tokens, [&](int64_t start, int64_t n) {
      const at::Tensor h = hidden_c.narrow(0, start, n);
      const at::Tensor t = targets.narrow(0, start, n);
      const at::Tensor valid = t.ne(kIgnored).to(at::kFloat);
      at::Tensor p = SliceLogits(h, weight_c, bias_c);  // [n, V] fp32, a fresh tensor: changed in place
      p.sub_(lse.narrow(0, start, n).unsqueeze(1)).exp_();
      p.scatter_add_(1, t.masked_fill(t.eq(kIgnored), 0).unsqueeze(1), valid.neg().unsqueeze(1));
      p.mul_((valid * scale).unsqueeze(1));
      const at::Tensor d = p.to(dtype);  // as the logits' cast back to the compute dtype
      if (need_h) {
        at::Tensor rows = grad_h.narrow(0, start, n);  // contiguous: whole rows
        at::mm_out(rows, d, weight_c);
      }
      if (need_w && grad_w.scalar_type() == dtype) grad_w.addmm_(d.t(), h);
      if (need_w && grad_w.scalar_type() != dtype) grad_w.add_(d.t().mm(h));
      if (need_b) grad_b.add_(d.sum(0, /*keepdim=*/false, at::kFloat));
    });
    if (need_b) grad_b = grad_b.to(bias.scalar_type());
    return {grad_h, grad_w, grad_b, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor SlicedCrossEntropy(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& bias,
                              const at::Tensor& targets, int64_t slice_tokens, at::Tensor* correct) {
  TORCH_CHECK(slice_tokens > 0, "model.loss_slice_tokens must be > 0 here, got ", slice_tokens);
  TORCH_CHECK(weight.dim() == 2 && hidden.size(-1) == weight.size(1), "LM head: hidden ", hidden.sizes(),
              " and weight ", weight.sizes(), " do not match");
  TORCH_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == weight.size(0)), "LM head: bias ",
              bias.sizes(), " for weight ", weight.sizes());
  const at::Tensor h = hidden.reshape({-1, hidden.size(-1)});
  const at::Tensor t = targets.reshape({-1});
  TORCH_CHECK(t.size(0) == h.size(0), "LM head: ", t.size(0), " targets for ", h.size(0), " tokens");
  const at::DeviceType type = hidden.device().type();
  const bool autocast = at::autocast::is_autocast_enabled(type) && weight.scalar_type() != at::kDouble;
  const at::ScalarType dtype = autocast ? at::autocast::get_autocast_dtype(type) : weight.scalar_type();
  TORCH_CHECK(autocast || hidden.scalar_type() == dtype, "LM head: hidden is ", hidden.scalar_type(),
              ", the weight ", weight.scalar_type(), " (without autocast they must agree)");
  const at::Tensor b = bias.defined() ? bias : at::empty({0}, weight.options());
  variable_list out = SlicedCrossEntropyFunction::apply(h, weight, b, t, slice_tokens,
                                                        static_cast<int64_t>(dtype), correct != nullptr);
  if (correct != nullptr) *correct = out[1];
  return out[0];
}

}  // namespace ps::models
