// MemoryPlan: model-data bytes per tier for a model and chunk settings, computed from
// parameter shapes alone (nothing is allocated), for `ps_train --plan`.
//
// Placement assumed (as the runtime does it): compute-dtype chunks move and fill the
// device budget; fp32 grad, master (when the compute dtype is lower) and Adam m/v
// chunks live on the host, with the compute chunks that do not fit on the device.
// The device must at least hold the working set of the most demanding block: the
// chunks of its parameters plus the chunks of parameters shared between blocks, which
// stay in use through backward.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "chunkmem/layout.h"

namespace ps::chunkmem {

struct PlanParam {
  std::string name;
  int64_t numel = 0;
  std::vector<int> used_by_blocks;
};

struct PlanInput {
  std::vector<PlanParam> params;
  int64_t chunk_numel = 0;               // 0 = ChooseChunkNumel
  int64_t compute_element_bytes = 4;     // 4 (fp32) or 2 (bf16/fp16)
  int64_t device_budget_bytes = 0;       // chunk bytes allowed on the device
  int64_t host_budget_bytes = 0;
  bool grads_in_compute_chunks = false;  // no fp32 grad chunks (see RuntimeOptions)
  // fp32 parameters kept outside the chunks on the host (chunk.cpu_embedding): value,
  // gradient, m and v, 16 bytes each.
  int64_t host_param_numel = 0;
  // Device bytes that are not chunks (activations), as estimated by the caller, and
  // how they relate to device_budget_bytes; printed only (0 = not printed).
  int64_t non_model_bytes = 0;
  std::string non_model_note;
};

struct MemoryPlan {
  ChunkLayout layout;
  int64_t param_numel = 0;
  int64_t compute_chunk_bytes = 0;  // all compute-dtype chunks
  int64_t host_only_bytes = 0;      // grad + master + m + v chunks
  int64_t host_param_bytes = 0;     // parameters outside the chunks (16 bytes each)
  int64_t min_device_bytes = 0;     // largest working set of one block
  int64_t device_bytes = 0;         // planned chunk bytes on the device
  int64_t host_bytes = 0;           // planned chunk bytes on the host
  double bytes_per_param = 0;       // model data / parameters, chunk padding included
  int64_t largest_param_numel = 0;  // most parameters these budgets hold at this bytes/param
  bool fits = false;
  std::string why_not;              // empty when it fits
};

MemoryPlan PlanMemory(const PlanInput& input);

// Human-readable report (several lines, sizes in GiB/MiB).
std::string FormatPlan(const MemoryPlan& plan, const PlanInput& input);

}  // namespace ps::chunkmem
