#include "trainer/engine/engine.h"

#include <ATen/TensorOperators.h>
#include <torch/cuda.h>

#include <algorithm>
#include <chrono>
#include <tuple>
#include <vector>

namespace ps::trainer {

using Clock = std::chrono::steady_clock;

void ReadDeferredValues(EngineState& state) {
  if (!state.deferred) return;
  const std::shared_ptr<DeferredValues> reader = state.deferred;  // outlives `finish` below
  DeferredValues& values = *reader;
  std::vector<std::tuple<std::array<int64_t, 3>, std::string, models::TensorMap*, std::string>> reads;
  for (auto [map_name, map] : {std::pair{"params", &state.params}, std::pair{"exp_avg", &state.exp_avg},
                               std::pair{"exp_avg_sq", &state.exp_avg_sq}}) {
    for (const auto& [name, tensor] : *map) {
      if (tensor.is_meta()) reads.emplace_back(values.Position(map_name, name), map_name, map, name);
    }
  }
  std::sort(reads.begin(), reads.end(), [](const auto& a, const auto& b) {
    return std::tie(std::get<0>(a), std::get<1>(a), std::get<3>(a)) < std::tie(std::get<0>(b), std::get<1>(b), std::get<3>(b));
  });
  struct FinishAtEnd {  // also when a read throws
    DeferredValues& values;
    ~FinishAtEnd() { values.Finish(); }
  } finish{values};
  for (const auto& [position, map_name, map, name] : reads) {
    (*map)[name] = values.Read(map_name, name).detach().to(at::kCPU, /*non_blocking=*/false, /*copy=*/true);
  }
  state.deferred.reset();
}

Clock::time_point TrainingEngine::PhaseBoundary() const {
  const at::Device dev = device();
  if (sync_phases_ && dev.is_cuda()) torch::cuda::synchronize(dev.index());
  return Clock::now();
}

ForwardBackwardResult TrainingEngine::ForwardBackward(const std::vector<models::Batch>& micro_batches,
                                                      const std::vector<double>& loss_divisors) {
  const at::Device dev = device();
  auto phase_end = [this]() { return PhaseBoundary(); };
  const auto k = static_cast<int64_t>(micro_batches.size());
  TORCH_CHECK(loss_divisors.empty() || loss_divisors.size() == micro_batches.size(),
              "ForwardBackward: one loss divisor per micro-batch");
  const std::vector<double> divisors =
      loss_divisors.empty() ? std::vector<double>(micro_batches.size(), static_cast<double>(k)) : loss_divisors;
  ForwardBackwardResult r;
  if (vertical_) {  // each block over every micro-batch, one backward
    std::vector<models::Batch> on_device;
    for (const auto& batch : micro_batches) on_device.push_back(batch.To(dev));
    const auto forward_start = phase_end();
    r.outs = ForwardMany(on_device, divisors);
    at::Tensor loss = r.outs.front().loss;
    for (size_t m = 1; m < r.outs.size(); ++m) loss = loss + r.outs[m].loss;
    const auto backward_start = phase_end();
    r.forward_ms += MsBetween(forward_start, backward_start);
    Backward(loss);
    r.backward_ms += MsBetween(backward_start, phase_end());
  } else {
    for (size_t m = 0; m < micro_batches.size(); ++m) {
      const models::Batch batch = micro_batches[m].To(dev);
      const auto forward_start = phase_end();
      r.outs.push_back(Forward(batch, k, divisors[m]));
      const auto backward_start = phase_end();
      r.forward_ms += MsBetween(forward_start, backward_start);
      Backward(r.outs.back().loss);
      r.backward_ms += MsBetween(backward_start, phase_end());
      r.outs.back().loss = r.outs.back().loss.detach();  // the graph is not kept past its backward
    }
  }
  for (auto& out : r.outs) out.loss = out.loss.detach();
  return r;
}

}  // namespace ps::trainer
