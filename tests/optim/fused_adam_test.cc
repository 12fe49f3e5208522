// FusedAdam (the plain engine's optimizer) against LibTorch's per-parameter
// torch::optim::AdamW / Adam with the same decay groups and clip_grad_norm_: the same
// parameters after several steps (to float rounding), the same norm, state created at the
// first update, a non-finite gradient (or one whose square overflows fp32) skips the step
// untouched, and SetState resumes.
#include <ATen/ATen.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>

#include <cmath>
#include <limits>

#include "optim/fused_adam.h"
// Last: c10 headers define a glog-style CHECK that Catch must override.
#include "tests/catch.h"

namespace ps::optim {
namespace {

std::vector<at::Tensor> MakeParams(int seed) {
  at::manual_seed(seed);
  return {at::randn({8, 5}).requires_grad_(), at::randn({5}).requires_grad_(), at::randn({3, 4}).requires_grad_()};
}

void SetGrads(const std::vector<at::Tensor>& params, int step, double scale) {
  at::manual_seed(1000 + step);
  for (const auto& p : params) p.mutable_grad() = at::randn(p.sizes()) * scale;
}

std::unique_ptr<torch::optim::Optimizer> Reference(const std::vector<at::Tensor>& params, const OptimizerConfig& c) {
  std::vector<at::Tensor> decay, no_decay;
  for (const auto& p : params) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  const auto betas = std::make_tuple(c.betas[0], c.betas[1]);
  if (c.type == OptimizerType::kAdamW) {
    groups.emplace_back(decay, std::make_unique<torch::optim::AdamWOptions>(
                                   torch::optim::AdamWOptions(c.lr).betas(betas).eps(c.eps).weight_decay(c.weight_decay)));
    groups.emplace_back(no_decay, std::make_unique<torch::optim::AdamWOptions>(
                                      torch::optim::AdamWOptions(c.lr).betas(betas).eps(c.eps).weight_decay(0.0)));
    return std::make_unique<torch::optim::AdamW>(groups, torch::optim::AdamWOptions(c.lr));
  }
  groups.emplace_back(decay, std::make_unique<torch::optim::AdamOptions>(
                                 torch::optim::AdamOptions(c.lr).betas(betas).eps(c.eps).weight_decay(c.weight_decay)));
  groups.emplace_back(no_decay, std::make_unique<torch::optim::AdamOptions>(
                                    torch::optim::AdamOptions(c.lr).betas(betas).eps(c.eps).weight_decay(0.0)));
  return std::make_unique<torch::optim::Adam>(groups, torch::optim::AdamOptions(c.lr));
}

TEST_CASE("FusedAdam matches torch::optim with decay groups and clipping") {
  for (const OptimizerType type : {OptimizerType::kAdamW, OptimizerType::kAdam}) {
    OptimizerConfig c;
    c.type = type;
    c.lr = 1e-2;
    c.weight_decay = 0.1;
    auto ours = MakeParams(1), theirs = MakeParams(1);
    FusedAdam fused(ours, c);
    auto reference = Reference(theirs, c);
    for (int step = 0; step < 6; ++step) {
      // Large gradients on even steps: the clip is active; small ones on odd steps: not.
      const double scale = step % 2 == 0 ? 5.0 : 0.01;
      const double max_norm = 1.0;
      SetGrads(ours, step, scale);
      SetGrads(theirs, step, scale);
      const auto r = fused.Step(1e-2, max_norm);
      const double norm = torch::nn::utils::clip_grad_norm_(theirs, max_norm);
      reference->step();
      CHECK_FALSE(r.skipped);
      CHECK(r.grad_norm == Approx(norm).epsilon(1e-6));
      for (size_t i = 0; i < ours.size(); ++i) {
        INFO("type " << static_cast<int>(type) << " step " << step << " param " << i);
        CHECK(at::allclose(ours[i], theirs[i], /*rtol=*/1e-5, /*atol=*/1e-6));
      }
    }
    CHECK(fused.steps(0) == 6);
  }
}

TEST_CASE("FusedAdam skips a non-finite step and resumes from SetState") {
  OptimizerConfig c;
  auto params = MakeParams(2);
  FusedAdam fused(params, c);
  SetGrads(params, 0, 1.0);
  fused.Step(1e-3, std::numeric_limits<double>::infinity());
  const auto before = params[0].detach().clone();
  params[0].mutable_grad()[0][0] = std::numeric_limits<float>::quiet_NaN();
  const auto r = fused.Step(1e-3, 1.0);
  CHECK(r.skipped);
  CHECK(std::isnan(r.grad_norm));
  CHECK(at::equal(params[0], before));
  CHECK(fused.steps(0) == 1);
  // Above kMaxUpdateGradNorm (its square within fp32, so the norm is finite): skipped
  // without clipping, applied when clipping shrinks it.
  params[0].mutable_grad()[0][0] = 1.5e19f;
  const auto huge = fused.Step(1e-3, std::numeric_limits<double>::infinity());
  CHECK(huge.skipped);
  CHECK(huge.grad_norm > kMaxUpdateGradNorm);
  CHECK(at::equal(params[0], before));
  CHECK(fused.steps(0) == 1);
  CHECK_FALSE(fused.Step(1e-3, 1.0).skipped);
  CHECK(fused.steps(0) == 2);
  CHECK(at::isfinite(fused.exp_avg_sq(0)).all().item<bool>());

  // A copy restored from the state continues bitwise like the original.
  auto copy = MakeParams(3);
  for (size_t i = 0; i < copy.size(); ++i) copy[i].detach().copy_(params[i].detach());
  FusedAdam restored(copy, c);
  for (int i = 0; i < 3; ++i) restored.SetState(i, fused.exp_avg(i), fused.exp_avg_sq(i), fused.steps(i));
  SetGrads(params, 5, 1.0);
  SetGrads(copy, 5, 1.0);
  fused.Step(1e-3, 1.0);
  restored.Step(1e-3, 1.0);
  for (size_t i = 0; i < copy.size(); ++i) CHECK(at::equal(copy[i], params[i]));
  // A parameter without a gradient is left alone and gets no state.
  FusedAdam partial(MakeParams(4), c);
  CHECK(partial.Step(1e-3, 1.0).grad_norm == 0.0);
  CHECK(partial.steps(0) == 0);
  CHECK_FALSE(partial.exp_avg(0).defined());
}

}  // namespace
}  // namespace ps::optim
