#include "trainer/plain_engine.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>

#include "trainer/autocast_scope.h"
#include "trainer/engine_state_io.h"

namespace ps::trainer {
namespace {

std::unique_ptr<torch::optim::Optimizer> MakeOptimizer(const std::vector<at::Tensor>& params,
                                                       const optim::OptimizerConfig& c) {
  // Weight decay on matrices only (nanoGPT/Megatron convention): biases and norm
  // weights are 1-D and never decayed.
  std::vector<at::Tensor> decay, no_decay;
  for (const auto& p : params) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  const auto betas = std::make_tuple(c.betas[0], c.betas[1]);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  if (c.type == optim::OptimizerType::kAdamW) {
    auto opts = [&](double wd) {
      return std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(c.lr).betas(betas).eps(c.eps).weight_decay(wd));
    };
    groups.emplace_back(decay, opts(c.weight_decay));
    groups.emplace_back(no_decay, opts(0.0));
    return std::make_unique<torch::optim::AdamW>(groups, torch::optim::AdamWOptions(c.lr));
  }
  auto opts = [&](double wd) {
    return std::make_unique<torch::optim::AdamOptions>(torch::optim::AdamOptions(c.lr).betas(betas).eps(c.eps).weight_decay(wd));
  };
  groups.emplace_back(decay, opts(c.weight_decay));
  groups.emplace_back(no_decay, opts(0.0));
  return std::make_unique<torch::optim::Adam>(groups, torch::optim::AdamOptions(c.lr));
}

// Adam and AdamW keep the same per-parameter fields in different types.
template <typename State>
void SaveMoments(const torch::optim::OptimizerParamState& base, const std::string& name, EngineState& out) {
  const auto& s = static_cast<const State&>(base);
  out.exp_avg[name] = s.exp_avg();
  out.exp_avg_sq[name] = s.exp_avg_sq();
  out.adam_steps[name] = s.step();
}

template <typename State>
std::unique_ptr<torch::optim::OptimizerParamState> MakeState(at::Tensor m, at::Tensor v, int64_t steps) {
  auto s = std::make_unique<State>();
  s->step(steps);
  s->exp_avg(std::move(m));
  s->exp_avg_sq(std::move(v));
  return s;
}

}  // namespace

PlainEngine::PlainEngine(models::Gpt model, const Config& config, at::Device device)
    : model_(std::move(model)), config_(config), device_(device) {
  model_->to(device_);
  model_->train();
  params_ = model_->BlockParameters();
  for (const auto& p : params_) param_tensors_.push_back(p.tensor);
  optimizer_ = MakeOptimizer(param_tensors_, config_.optimizer);
}

void PlainEngine::BeginStep() { optimizer_->zero_grad(/*set_to_none=*/true); }

at::Tensor PlainEngine::Forward(const at::Tensor& x, const at::Tensor& y, int64_t accum_steps) {
  AutocastScope autocast(device_, config_.precision.dtype);
  return model_->Loss(x, y) / static_cast<double>(accum_steps);
}

void PlainEngine::Backward(const at::Tensor& loss) { loss.backward(); }

StepOutcome PlainEngine::OptimizerStep(double lr, double max_norm) {
  for (auto& group : optimizer_->param_groups()) group.options().set_lr(lr);
  StepOutcome out;
  out.grad_norm = torch::nn::utils::clip_grad_norm_(param_tensors_, max_norm);
  optimizer_->step();
  return out;
}

void PlainEngine::BeginEval() { model_->eval(); }

at::Tensor PlainEngine::EvalLoss(const at::Tensor& x, const at::Tensor& y) {
  at::NoGradGuard no_grad;
  AutocastScope autocast(device_, config_.precision.dtype);
  return model_->Loss(x, y);
}

void PlainEngine::EndEval() { model_->train(); }

EngineState PlainEngine::Save() const {
  EngineState out;
  const bool adamw = config_.optimizer.type == optim::OptimizerType::kAdamW;
  for (const auto& p : params_) {
    out.params[p.name] = p.tensor.detach();
    const auto it = optimizer_->state().find(p.tensor.unsafeGetTensorImpl());
    if (it == optimizer_->state().end()) continue;  // never updated (no gradient yet)
    if (adamw) {
      SaveMoments<torch::optim::AdamWParamState>(*it->second, p.name, out);
    } else {
      SaveMoments<torch::optim::AdamParamState>(*it->second, p.name, out);
    }
  }
  return out;
}

void PlainEngine::Load(const EngineState& state) {
  at::NoGradGuard no_grad;
  const bool adamw = config_.optimizer.type == optim::OptimizerType::kAdamW;
  std::vector<std::string> names;
  for (const auto& p : params_) names.push_back(p.name);
  CheckNoUnknownParams(state, names);
  for (const auto& p : params_) {
    p.tensor.copy_(StateTensor(state.params, p.name, p.tensor.sizes(), "parameter", state.params_file));
    optimizer_->state().erase(p.tensor.unsafeGetTensorImpl());
    const int64_t steps = StateSteps(state, p.name);
    if (steps == 0) continue;  // as LibTorch: no state before the first update
    auto m = StateTensor(state.exp_avg, p.name, p.tensor.sizes(), "optimizer.exp_avg", state.optimizer_file).to(p.tensor.options()).clone();
    auto v = StateTensor(state.exp_avg_sq, p.name, p.tensor.sizes(), "optimizer.exp_avg_sq", state.optimizer_file).to(p.tensor.options()).clone();
    optimizer_->state()[p.tensor.unsafeGetTensorImpl()] =
        adamw ? MakeState<torch::optim::AdamWParamState>(m, v, steps)
              : MakeState<torch::optim::AdamParamState>(m, v, steps);
  }
}

}  // namespace ps::trainer
