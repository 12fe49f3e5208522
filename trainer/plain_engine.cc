#include "trainer/plain_engine.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include "trainer/autocast_scope.h"
#include "trainer/engine_state_io.h"

namespace ps::trainer {

PlainEngine::PlainEngine(models::Gpt model, const Config& config, at::Device device)
    : model_(std::move(model)), config_(config), device_(device) {
  model_->to(device_);
  model_->train();
  params_ = model_->BlockParameters();
  for (const auto& p : params_) param_tensors_.push_back(p.tensor);
  optimizer_ = std::make_unique<optim::FusedAdam>(param_tensors_, config_.optimizer);
}

void PlainEngine::BeginStep() {
  for (auto& p : param_tensors_) p.mutable_grad() = at::Tensor();
}

at::Tensor PlainEngine::Forward(const at::Tensor& x, const at::Tensor& y, int64_t accum_steps) {
  AutocastScope autocast(device_, config_.precision.dtype);
  return model_->Loss(x, y) / static_cast<double>(accum_steps);
}

void PlainEngine::Backward(const at::Tensor& loss) { loss.backward(); }

StepOutcome PlainEngine::OptimizerStep(double lr, double max_norm) {
  const optim::FusedAdamStepResult r = optimizer_->Step(lr, max_norm);
  StepOutcome out;
  out.grad_norm = r.grad_norm;
  out.skipped = r.skipped;
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
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto& p = params_[i];
    out.params[p.name] = p.tensor.detach();
    const int64_t steps = optimizer_->steps(static_cast<int>(i));
    if (steps == 0) continue;  // never updated (no gradient yet)
    out.exp_avg[p.name] = optimizer_->exp_avg(static_cast<int>(i));
    out.exp_avg_sq[p.name] = optimizer_->exp_avg_sq(static_cast<int>(i));
    out.adam_steps[p.name] = steps;
  }
  return out;
}

void PlainEngine::Load(const EngineState& state) {
  at::NoGradGuard no_grad;
  std::vector<std::string> names;
  for (const auto& p : params_) names.push_back(p.name);
  CheckNoUnknownParams(state, names);
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto& p = params_[i];
    p.tensor.copy_(StateTensor(state.params, p.name, p.tensor.sizes(), "parameter", state.params_file));
    const int64_t steps = StateSteps(state, p.name);
    if (steps == 0) {  // as torch.optim: no state before the first update
      optimizer_->SetState(static_cast<int>(i), at::Tensor(), at::Tensor(), 0);
      continue;
    }
    optimizer_->SetState(
        static_cast<int>(i),
        StateTensor(state.exp_avg, p.name, p.tensor.sizes(), "optimizer.exp_avg", state.optimizer_file),
        StateTensor(state.exp_avg_sq, p.name, p.tensor.sizes(), "optimizer.exp_avg_sq", state.optimizer_file), steps);
  }
}

}  // namespace ps::trainer
