// Which chunks a run's precision gives, in element bytes (no LibTorch), so the chunk
// allocation (chunk_allocation.h), the tier plan (tier_plan.h) and the speculation
// backups (trainer/engine/chunk_setup.cc) follow one rule:
// - the fp32 master is a chunk of its own when the compute dtype is narrower than fp32
//   and the run keeps a master (optimizer.master_weights fp32); otherwise the compute
//   chunk is the master (fp32 values, or without a master the weights' only copy);
// - the update writes the master: fp32, or without a master the compute dtype;
// - gradients are fp32 with a master, else in the compute dtype.
#pragma once

#include <cstdint>

namespace ps::chunkmem {

constexpr bool SeparateMaster(int64_t compute_element_bytes, bool master_weights) {
  return compute_element_bytes != 4 && master_weights;
}
constexpr int64_t UpdatedWeightBytes(int64_t compute_element_bytes, bool master_weights) {
  return master_weights ? 4 : compute_element_bytes;
}
constexpr int64_t GradElementBytes(int64_t compute_element_bytes, bool master_weights) {
  return UpdatedWeightBytes(compute_element_bytes, master_weights);  // gradients in the dtype the update writes
}

}  // namespace ps::chunkmem
