// TierPlan: which tier every chunk of a run sits on from start-up, and the bytes each
// tier holds at most, decided before anything is allocated, from the layout and the
// tier budgets alone. PlanMemory calls PlanTiers once per run: `ps_train --plan` prints
// the result, and the run hands that same result to its ChunkRuntime
// (RuntimeOptions::tiers), which never computes it again, so the plan and the run
// cannot disagree (docs/chunkmem.md, "Tier plan").
// Not to be confused with chunk.placement (PlacementKind): how a traced device budget
// is given out per moment, dynamic or static (docs/chunkmem.md, "Names").
//
// The rule:
// - Optimizer state (fp32 master when it is not the compute chunk, Adam m, v) of the
//   chunks chosen here is allocated on the device at start-up and stays there; the
//   hybrid Adam updates those chunks on the device. Chosen in layout order (chunk 0
//   first: the embedding and first blocks, whose backward runs last, so their compute
//   chunks are on the device when the optimizer runs) while the state fits
//   margin_use_ratio x (device chunk room - largest block working set - the device
//   update's scratch, chunkmem/update_scratch.h).
// - Everything else starts on the host: fp32 grad chunks, the other chunks' optimizer
//   state, and every compute chunk. The host keeps room for all compute chunks for the
//   whole run (they move to the device on access and back on eviction), so its bytes at
//   start-up are its most at any moment.
// - The device holds the pinned optimizer state plus moving compute chunks; the plan
//   requires the room left for them to hold the largest block working set.
// - ZeRO (world_size > 1): every byte count above covers the chunks this rank owns;
//   the working set of a block is, per chunk group it touches, the owned compute chunk
//   (the gather's input), the gathered group (world_size chunks in the compute dtype)
//   and its fp32 gradient buffer (world_size chunks, reduce-scattered in fp32).
// Pure function; no tensors.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "chunkmem/layout.h"
#include "chunkmem/master_rule.h"

namespace ps::chunkmem {

// Grad-chunk-sized device slots the gradient path keeps free for flushes while any
// gradient stages (GradSink: kMaxFlushesInFlight + 1; checked there).
constexpr int64_t kGradSinkSlots = 3;

// Which gradient chunks of the chunks updated on the device stay there (their gradients
// then add in place): one rule for GradSink::PinToDevice and the plan. `room_bytes` is
// what the device leaves beside the compute working set and the pinned optimizer state;
// `staging_bytes` what the gradient path's staging slots need while any gradient stages.
// Gradients stage when some chunk updates on the host (`host_updated`) or when a chunk
// updated on the device does not keep its gradient chunk. So every one stays, with no
// slots kept, only when none updates on the host and all fit in `room_bytes`; otherwise
// the slots are kept and, in order, each that fits in what they leave stays.
// `grad_bytes`: each candidate's gradient chunk, in layout order; returns [candidate].
std::vector<bool> KeepDeviceGrads(int64_t room_bytes, int64_t staging_bytes, bool host_updated,
                                  const std::vector<int64_t>& grad_bytes);

struct TierPlanInput {
  int64_t compute_element_bytes = 4;     // 4 (fp32: the compute chunk is the master) or 2
  int64_t state_element_bytes = 4;       // Adam m and v, each: 4 (fp32), 2 (bf16), 1 (8-bit + scales)
  bool grads_in_compute_chunks = false;  // no fp32 grad chunks (RuntimeOptions)
  // RuntimeOptions::master_weights: false (bf16) keeps no fp32 master and gradients in
  // bf16 grad chunks (SeparateMasterBytes, GradElementBytes).
  bool master_weights = true;
  // Block-major backward (RuntimeOptions::block_major_backward, the vertical schedule):
  // a block's chunks keep their fp32 staging slots open through all its micro-batches,
  // so the working set counts one fp32 slot per compute chunk of the block.
  bool block_major_grads = false;
  // Chunk bytes the device tier may hold at all (the store's budget: fixed budget, or
  // the traced capacity).
  int64_t device_budget_bytes = 0;
  // Chunk bytes the device may hold beside the activations: the fixed budget, or the
  // traced capacity minus the activation estimate (chunk.placement static: at most the
  // warm-up share). < 0: device_budget_bytes.
  int64_t device_chunk_room_bytes = -1;
  // How the message names that room ("the device budget of chunk.device_budget_bytes").
  std::string device_room_name = "the device budget";
  // Traced budget: chunk bytes allowed on the device during warm-up besides the pinned
  // optimizer state (warmup_device_chunk_ratio x capacity); 0 = not traced.
  int64_t warmup_share_bytes = 0;
  int64_t host_budget_bytes = 0;
  int64_t host_param_bytes = 0;          // parameters kept outside the chunks, on the host
  // fp32 grad-chunk-sized buffers the gradient path borrows on the host at once
  // (landing buffers of gradient flushes; ChunkRuntime::HostGradScratchChunks).
  int64_t host_scratch_chunks = 0;
  // The optimizer's speculation backups (optimizer.speculation_slots): slots asked for,
  // and each slot's bytes per element of the largest chunk (fp32 master, m, v, plus the
  // compute chunk when it is not the master). Only chunks updated on the host speculate,
  // so at most one slot per such owned chunk is reserved (TierPlan::speculation_slots).
  int64_t speculation_slots = 0;
  int64_t backup_bytes_per_element = 0;
  // Share of the device margin given to optimizer state (chunk.margin_use_ratio);
  // 0 = every chunk's optimizer state on the host (optimizer.hybrid_adam: false).
  double margin_use_ratio = 0.0;
  // ZeRO (docs/comm.md, "ZeRO over chunk groups"): this rank of `world_size` holds the
  // compute, grad and optimizer chunks it owns (chunk c is owned by rank c mod
  // world_size) and gathers each group of world_size consecutive chunks into a device
  // buffer while a block uses it. 1 = one process: every chunk is owned.
  int64_t world_size = 1;
  int64_t rank = 0;
  // ZeRO with world_size 1 too (distributed.force_collectives): the one chunk of each
  // group is still gathered into a group buffer, so the working set counts it.
  bool zero = false;
  // ZeRO with prefetch (chunk.prefetch_depth > 0): while a block computes, the groups of
  // the next one are gathered, so the working set is the groups of two adjacent blocks.
  bool prefetch_groups = false;
  // The NVMe tier (chunk.nvme_dir; docs/chunkmem.md, "NVMe tier"): the optimizer state of
  // host-updated chunks that host memory does not keep goes to a file, streamed through
  // a ring of `nvme_ring_slots` host buffers (at most one per chunk on the tier:
  // NvmeRingSlots) of the largest such chunk's state (4 KiB-aligned parts:
  // chunkmem/nvme_layout.h). Host memory keeps state in layout order
  // while it fits `nvme_host_budget_bytes`; < 0: what the host budget leaves after the
  // compute and grad chunks, the host buffers, the parameters outside the chunks and the
  // ring.
  bool nvme = false;
  int64_t nvme_host_budget_bytes = -1;
  int64_t nvme_ring_slots = 4;
};

struct TierPlan {
  std::vector<bool> optimizer_on_device;  // [chunk]: master/m/v on the device from start-up
  int device_optimizer_chunks = 0;
  int64_t device_optimizer_bytes = 0;     // pinned on the device for the whole run
  // Gradients in chunks of their own (grad_bytes > 0): of the chunks updated on the
  // device, those whose gradient chunk the room left beside the state holds
  // (KeepDeviceGrads, the rule of GradSink::PinToDevice, on the plan's figures): an
  // estimate (with a fixed budget the run keeps a few less, its working set counting the
  // chunks it prefetches; with a traced budget the measured activations decide). The others' gradients cross to the host in
  // backward and back for the update.
  int device_grad_chunks = 0;
  int64_t crossing_grad_bytes = 0;  // the others' gradient chunks: each step to the host and back
  // The device update's scratch (chunkmem/update_scratch.h), kept off the margin before
  // optimizer state is placed; 0 when no chunk's state is on the device.
  int64_t device_scratch_bytes = 0;
  int64_t working_set_bytes = 0;          // compute chunks of the most demanding block (block-major: and their fp32 slots)
  // Block-major backward (the vertical schedule): of the working set, the gradient slots
  // its chunks keep open; 0 otherwise.
  int64_t working_set_grad_bytes = 0;
  // ZeRO: of the working set, the group buffers (gathered compute chunks and the fp32
  // gradients reduce-scattered from them) of that block; 0 with one process.
  int64_t group_buffer_bytes = 0;
  int owned_chunks = 0;                   // chunks whose data this rank holds (all, with one process)
  int frozen_chunks = 0;                  // of which frozen: compute kind only (no grad or optimizer state)
  int64_t compute_bytes = 0;              // all compute chunks
  int64_t grad_bytes = 0;                 // all fp32 grad chunks (host)
  int64_t host_optimizer_bytes = 0;       // optimizer state of the other chunks in host memory
  // The NVMe tier: [chunk] its state in the file; the file's bytes; the ring's host
  // bytes (in host_chunk_bytes: borrowed from the host tier). All 0 without chunks there.
  std::vector<bool> optimizer_on_nvme;
  int nvme_chunks = 0;
  int64_t nvme_bytes = 0;
  int64_t nvme_ring_slots = 0;  // NvmeRingSlots: chunk.nvme_ring_slots, at most one per chunk on the tier
  int64_t nvme_ring_bytes = 0;
  int64_t host_scratch_bytes = 0;         // the gradient path's host buffers and the speculation slots, at most
  // Speculation slots reserved on the host: min(slots asked for, owned chunks whose
  // optimizer state is on the host). The optimizer borrows exactly these.
  int64_t speculation_slots = 0;
  // Most chunk bytes the device holds: the pinned state plus compute chunks up to the room.
  int64_t device_bytes = 0;
  // Traced budget: chunk bytes allowed on the device during warm-up (pinned state plus
  // the warm-up share, within the room; more only while the chunks in use need it).
  int64_t warmup_device_bytes = 0;
  // Most chunk bytes the host holds at any moment (start-up: every compute chunk there),
  // plus the parameters outside the chunks.
  int64_t host_bytes = 0;
  // host_bytes less the parameters outside the chunks: what the store's host tier
  // holds at most, and the size of its pool (MakeHostPoolAllocator).
  int64_t host_chunk_bytes = 0;
  std::string why_not;                    // empty when it fits; names the budget and the shortfall
  bool fits() const { return why_not.empty(); }
};

// Bytes per element of the separate fp32 master (4, else 0) and of a grad chunk
// (master_rule.h).
inline int64_t SeparateMasterBytes(const TierPlanInput& in) {
  return SeparateMaster(in.compute_element_bytes, in.master_weights) ? 4 : 0;
}
inline int64_t GradElementBytes(const TierPlanInput& in) {
  return GradElementBytes(in.compute_element_bytes, in.master_weights);
}

// Optimizer-state bytes of a trainable chunk of `capacity_numel`: m and v
// (StatePayloadBytes each), plus the fp32 master when it is not the compute chunk.
int64_t OptimizerChunkBytes(int64_t capacity_numel, const TierPlanInput& input);
// The same state's bytes in the NVMe tier's file (each part 4 KiB-aligned).
int64_t NvmeChunkBytes(int64_t capacity_numel, const TierPlanInput& input);

// `used_by_blocks[i]`: the blocks that use parameter i of the layout (several for a
// shared parameter, whose chunk stays in use through backward).
TierPlan PlanTiers(const ChunkLayout& layout, const std::vector<std::vector<int>>& used_by_blocks,
                   const TierPlanInput& input);

}  // namespace ps::chunkmem
