#include "trainer/engine/plain_engine.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/nn/module.h>

#include <functional>

#include "trainer/engine/autocast_scope.h"
#include "trainer/engine/engine_state_io.h"

namespace ps::trainer {

namespace {

// Runs `op` over `tensors` packed into contiguous fp32 buckets of about `bucket_bytes`:
// bucket k+1 is packed while bucket k's collective runs; results are unpacked in order.
void BucketedCollective(const std::vector<at::Tensor>& tensors, int64_t bucket_bytes,
                        const std::function<comm::WorkPtr(at::Tensor)>& op) {
  struct Bucket {
    std::vector<at::Tensor> members;
    at::Tensor flat;
    comm::WorkPtr work;
  };
  std::vector<Bucket> buckets;
  auto launch = [&](std::vector<at::Tensor> members) {
    std::vector<at::Tensor> views;
    for (const auto& t : members) views.push_back(t.reshape({-1}).to(at::kFloat));
    Bucket b;
    b.flat = at::cat(views);
    b.members = std::move(members);
    b.work = op(b.flat);
    buckets.push_back(std::move(b));
  };
  std::vector<at::Tensor> pending;
  int64_t pending_bytes = 0;
  for (const auto& t : tensors) {
    pending.push_back(t);
    pending_bytes += t.numel() * 4;
    if (pending_bytes >= bucket_bytes) {
      launch(std::move(pending));
      pending.clear();
      pending_bytes = 0;
    }
  }
  if (!pending.empty()) launch(std::move(pending));
  for (auto& b : buckets) {
    b.work->Wait();
    int64_t offset = 0;
    for (auto& t : b.members) {
      t.copy_(b.flat.narrow(0, offset, t.numel()).view(t.sizes()));
      offset += t.numel();
    }
  }
}

}  // namespace

PlainEngine::PlainEngine(std::unique_ptr<models::TrainableModel> model, const Config& config, at::Device device,
                         const models::InitPlan& init, comm::Communicator* comm)
    : model_(std::move(model)), config_(config), device_(device), comm_(comm) {
  models::InitParameters(model_->BlockParameters(), init, [&](const std::string& name, at::Tensor values) {
    model_->InitParameter(name, std::move(values), init.seed);
  });
  model_->module().to(device_);
  model_->module().train();
  params_ = model_->BlockParameters();
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!params_[i].tensor.requires_grad()) continue;
    trainable_.push_back(i);
    param_tensors_.push_back(params_[i].tensor);
  }
  optimizer_ = std::make_unique<optim::FusedAdam>(param_tensors_, config_.optimizer);
}

void PlainEngine::BeginStep(double /*lr*/) {
  for (auto& p : param_tensors_) p.mutable_grad() = at::Tensor();
  if (comm_ != nullptr && !params_broadcast_) {  // after Load(): every rank starts from rank 0's values
    at::NoGradGuard no_grad;
    std::vector<at::Tensor> values;
    for (const auto& p : param_tensors_) values.push_back(p.detach());
    BucketedCollective(values, kBucketBytes, [this](at::Tensor flat) { return comm_->Broadcast(flat, 0); });
    params_broadcast_ = true;
  }
}

models::LossOutput PlainEngine::Forward(const models::Batch& batch, int64_t /*accum_steps*/, double loss_divisor) {
  AutocastScope autocast(device_, config_.precision.dtype);
  models::LossOutput out = model_->Loss(batch);
  out.loss = out.loss / loss_divisor;
  return out;
}

std::vector<models::LossOutput> PlainEngine::ForwardMany(const std::vector<models::Batch>& batches,
                                                         const std::vector<double>& loss_divisors) {
  AutocastScope autocast(device_, config_.precision.dtype);
  std::vector<models::LossOutput> outs = model_->LossMany(batches);
  for (size_t m = 0; m < outs.size(); ++m) outs[m].loss = outs[m].loss / loss_divisors[m];
  return outs;
}

void PlainEngine::Backward(const at::Tensor& loss) { loss.backward(); }

void PlainEngine::SyncGradients() {
  if (comm_ == nullptr) return;
  std::vector<at::Tensor> grads;
  for (auto& p : param_tensors_) {
    if (!p.grad().defined()) p.mutable_grad() = at::zeros_like(p);  // same buckets on every rank
    grads.push_back(p.grad());
  }
  BucketedCollective(grads, kBucketBytes, [this](at::Tensor flat) { return comm_->AllReduce(flat, comm::ReduceOp::kAvg); });
}

StepOutcome PlainEngine::OptimizerStep(double lr, double max_norm) {
  const optim::FusedAdamStepResult r = optimizer_->Step(lr, max_norm);
  StepOutcome out;
  out.grad_norm = r.grad_norm;
  out.skipped = r.skipped;
  return out;
}

void PlainEngine::BeginEval() { model_->module().eval(); }

models::LossOutput PlainEngine::EvalLoss(const models::Batch& batch) {
  at::NoGradGuard no_grad;
  AutocastScope autocast(device_, config_.precision.dtype);
  return model_->Loss(batch);
}

void PlainEngine::EndEval() { model_->module().train(); }

std::string PlainEngine::FrozenFingerprint() const {
  std::vector<std::pair<std::string, at::Tensor>> frozen;
  for (const auto& p : params_) {
    if (!p.tensor.requires_grad()) frozen.emplace_back(p.name, p.tensor);
  }
  return frozen.empty() ? std::string() : ValuesFingerprint(frozen);
}

EngineState PlainEngine::Save() const {
  EngineState out;
  for (size_t k = 0; k < trainable_.size(); ++k) {
    const auto& p = params_[trainable_[k]];
    out.params[p.name] = p.tensor.detach();
    const int64_t steps = optimizer_->steps(static_cast<int>(k));
    if (steps == 0) continue;  // never updated (no gradient yet)
    out.exp_avg[p.name] = optimizer_->exp_avg(static_cast<int>(k));
    out.exp_avg_sq[p.name] = optimizer_->exp_avg_sq(static_cast<int>(k));
    out.adam_steps[p.name] = steps;
  }
  const std::string frozen = FrozenFingerprint();
  if (!frozen.empty()) out.extra["frozen_fingerprint"] = frozen;
  return out;
}

models::TensorMap PlainEngine::GatherParams() const {
  models::TensorMap out;
  for (const auto& p : params_) out[p.name] = p.tensor.detach();
  return out;
}

void PlainEngine::Load(const EngineState& state) {
  at::NoGradGuard no_grad;
  std::vector<std::string> names;
  for (const auto& p : params_) names.push_back(p.name);
  CheckNoUnknownParams(state, names);
  for (const auto& p : params_) {  // frozen: written when given (the base from model.init_from), else kept
    if (!p.tensor.requires_grad() && state.params.count(p.name) != 0) {
      p.tensor.copy_(StateTensor(state.params, p.name, p.tensor.sizes(), "parameter", state.params_file));
    }
  }
  CheckFrozenFingerprint(state, FrozenFingerprint());
  for (size_t k = 0; k < trainable_.size(); ++k) {
    const auto& p = params_[trainable_[k]];
    p.tensor.copy_(StateTensor(state.params, p.name, p.tensor.sizes(), "parameter", state.params_file));
    const int64_t steps = StateSteps(state, p.name);
    if (steps == 0) {  // as torch.optim: no state before the first update
      optimizer_->SetState(static_cast<int>(k), at::Tensor(), at::Tensor(), 0);
      continue;
    }
    optimizer_->SetState(
        static_cast<int>(k),
        StateMoment(state, state.exp_avg, p.name, p.tensor.sizes(), "optimizer.exp_avg", optim::QuantCode::kSigned),
        StateMoment(state, state.exp_avg_sq, p.name, p.tensor.sizes(), "optimizer.exp_avg_sq",
                    optim::QuantCode::kUnsigned),
        steps);
  }
}

}  // namespace ps::trainer
