// MemoryPlan: model-data bytes per tier for a model and chunk settings, computed from
// parameter shapes alone (nothing is allocated), for `ps_train --plan`.
//
// Tiers: PlanTiers (chunkmem/tier_plan.h) with TierPlanInputOf(input); the run hands
// the resulting TierPlan to its runtime (RuntimeOptions::tiers), so the plan's
// verdict and reason are the run's: optimizer state of the chunks that fit the device
// margin on the device from start-up, everything else on the host, which keeps room
// for every compute chunk. The device must at least hold the working set of the most
// demanding block: the chunks of its parameters plus the chunks of parameters shared
// between blocks, which stay in use through backward.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "chunkmem/layout.h"
#include "chunkmem/state_layout.h"
#include "chunkmem/tier_plan.h"

namespace ps::chunkmem {

struct PlanParam {
  std::string name;
  int64_t numel = 0;
  std::vector<int> used_by_blocks;
  bool frozen = false;  // a frozen chunk's: compute kind alone (k bytes per element)
};

struct PlanInput {
  std::vector<PlanParam> params;
  int64_t chunk_numel = 0;               // 0 = ChooseChunkNumel
  int64_t compute_element_bytes = 4;     // 4 (fp32) or 2 (bf16/fp16)
  int64_t state_element_bytes = 4;       // Adam m and v, each: 4 (fp32), 2 (bf16), 1 (8-bit + scales)
  int64_t device_budget_bytes = 0;       // chunk bytes allowed on the device beside the activations
  // The store's hard device budget (a traced capacity is more than device_budget_bytes,
  // which then is what the estimated activations leave); 0 = device_budget_bytes.
  int64_t device_capacity_bytes = 0;
  std::string device_room_name = "the device budget";  // names device_budget_bytes in messages
  int64_t warmup_share_bytes = 0;        // traced budget: chunk bytes during warm-up (TierPlanInput)
  double margin_use_ratio = 0.0;         // device margin share for optimizer state; 0 = all on the host
  int64_t host_scratch_chunks = 0;       // the gradient path's host buffers (TierPlanInput)
  int64_t speculation_slots = 0;         // the optimizer's speculation backups (TierPlanInput)
  int64_t backup_bytes_per_element = 0;  // bytes per element of one slot (TierPlanInput)
  int64_t host_budget_bytes = 0;
  bool grads_in_compute_chunks = false;  // no fp32 grad chunks (see RuntimeOptions)
  bool master_weights = true;            // false: no fp32 master, bf16 grad chunks (TierPlanInput)
  bool block_major_grads = false;        // the vertical schedule's staging slots (TierPlanInput)
  // fp32 parameters kept outside the chunks on the host (chunk.cpu_embedding): value,
  // gradient, m and v, 16 bytes each.
  int64_t host_param_numel = 0;
  // Frozen ones (a LoRA run's base embedding): the value alone, 4 bytes each.
  int64_t frozen_host_param_numel = 0;
  // Device bytes that are not chunks (activations), as estimated by the caller, and
  // how they relate to device_budget_bytes; printed only (0 = not printed).
  int64_t non_model_bytes = 0;
  std::string non_model_note;
  // ZeRO: the plan of rank `rank` of `world_size` (TierPlanInput); the layout's chunk
  // count is padded to a multiple of world_size, and every byte figure is this rank's.
  int64_t world_size = 1;
  int64_t rank = 0;
  bool zero = false;             // ZeRO at world_size 1 too (TierPlanInput::zero)
  bool prefetch_groups = false;  // ZeRO: the next block's groups gathered ahead (TierPlanInput)
  // The NVMe tier (TierPlanInput): on, host bytes for state kept in RAM (< 0: derived), ring slots.
  bool nvme = false;
  int64_t nvme_host_budget_bytes = -1;
  int64_t nvme_ring_slots = 4;
};

struct MemoryPlan {
  ChunkLayout layout;
  int64_t param_numel = 0;
  int64_t compute_chunk_bytes = 0;  // all compute-dtype chunks (ZeRO: this rank's)
  int64_t host_only_bytes = 0;      // grad + master + m + v chunks (ZeRO: this rank's)
  double optimizer_bytes_per_element = 0;  // master (when separate) + m + v, per trainable chunk element
  int64_t host_param_bytes = 0;     // parameters outside the chunks (16 bytes each)
  int64_t min_device_bytes = 0;     // largest working set of one block
  int64_t device_bytes = 0;         // most chunk bytes on the device (tiers.device_bytes)
  int64_t host_bytes = 0;           // most bytes on the host, at start-up (tiers.host_bytes)
  TierPlan tiers;                   // where each chunk sits (what the run's runtime is given)
  double bytes_per_param = 0;       // model data / parameters, chunk padding included (ZeRO: this rank's data)
  int64_t largest_param_numel = 0;  // most parameters these budgets hold at this bytes/param
  bool fits = false;
  std::string why_not;              // empty when it fits
};

MemoryPlan PlanMemory(const PlanInput& input);

// The tier-plan part of `input`, as PlanMemory hands it to PlanTiers.
TierPlanInput TierPlanInputOf(const PlanInput& input);

// Human-readable report (several lines, sizes in GiB/MiB).
std::string FormatPlan(const MemoryPlan& plan, const PlanInput& input);

}  // namespace ps::chunkmem
