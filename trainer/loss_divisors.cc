#include "trainer/loss_divisors.h"

#include <ATen/ops/full.h>

#include <cstdint>

namespace ps::trainer {

std::vector<double> TargetWeightedDivisors(const std::vector<models::Batch>& micro_batches, comm::Communicator* comm,
                                           at::Device device) {
  constexpr int64_t kIgnored = -100;  // at::cross_entropy_loss's ignore_index
  std::vector<int64_t> counts;
  int64_t local = 0;
  for (const auto& batch : micro_batches) {
    counts.push_back(batch.labels.ne(kIgnored).sum().item<int64_t>());
    local += counts.back();
  }
  int64_t total = local;
  if (comm != nullptr) {
    at::Tensor n = at::full({1}, local, at::TensorOptions().dtype(at::kLong).device(device));
    comm->AllReduce(n, comm::ReduceOp::kSum)->Wait();
    total = n.item<int64_t>();
  }
  const int64_t world = comm != nullptr ? comm->world_size() : 1;
  std::vector<double> divisors;
  for (const int64_t c : counts) {
    divisors.push_back(c > 0 && total > 0 ? static_cast<double>(total) / static_cast<double>(c * world) : 1.0);
  }
  return divisors;
}

}  // namespace ps::trainer
