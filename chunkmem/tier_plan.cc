#include "chunkmem/tier_plan.h"

#include "chunkmem/nvme_layout.h"
#include "chunkmem/state_layout.h"
#include "chunkmem/update_scratch.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdio>
#include <set>

namespace ps::chunkmem {
namespace {

int64_t Mul(int64_t a, int64_t b) {
  int64_t out = 0;
  TORCH_CHECK(!__builtin_mul_overflow(a, b, &out), "tier plan: ", a, " x ", b, " bytes overflows int64");
  return out;
}

int64_t Add(int64_t a, int64_t b) {
  int64_t out = 0;
  TORCH_CHECK(!__builtin_add_overflow(a, b, &out), "tier plan: ", a, " + ", b, " bytes overflows int64");
  return out;
}

// One of m, v: StatePayloadBytes, counted with overflow checks.
int64_t MomentBytes(int64_t capacity, const TierPlanInput& in) {
  return in.state_element_bytes == 1 ? Add(capacity, StateScaleBytes(capacity)) : Mul(capacity, in.state_element_bytes);
}

// "123456789 bytes (117.74 MiB)": exact, and readable.
std::string Bytes(int64_t b) {
  char buf[64];
  const double d = static_cast<double>(b);
  if (d >= 1024.0 * 1024 * 1024) {
    std::snprintf(buf, sizeof(buf), "%lld bytes (%.2f GiB)", static_cast<long long>(b), d / (1024.0 * 1024 * 1024));
  } else {
    std::snprintf(buf, sizeof(buf), "%lld bytes (%.2f MiB)", static_cast<long long>(b), d / (1024.0 * 1024));
  }
  return buf;
}

// Per chunk: compute-dtype bytes and optimizer-state bytes; the owned totals into `p`.
struct ChunkSizes {
  std::vector<int64_t> compute, optimizer;
  std::vector<int64_t> grad;  // [chunk] its gradient chunk's bytes; 0: none (frozen, or gradients in the compute slots)
  int64_t largest_grad = 0;  // the largest grad chunk's bytes (if any)
  int64_t largest_fp32 = 0;  // the largest trainable chunk's bytes in fp32
};

ChunkSizes SizeChunks(const ChunkLayout& layout, const TierPlanInput& in, TierPlan& p) {
  const int n = layout.num_chunks();
  const int64_t k = in.compute_element_bytes;
  ChunkSizes z;
  z.compute.resize(n);
  z.optimizer.resize(n);
  z.grad.assign(n, 0);
  for (int c = 0; c < n; ++c) {
    const int64_t capacity = layout.chunks()[c].capacity_numel;
    const bool frozen = layout.chunks()[c].frozen;  // the compute kind alone
    z.compute[c] = Mul(capacity, k);
    z.optimizer[c] = frozen ? 0 : OptimizerChunkBytes(capacity, in);
    if (!frozen) {
      z.largest_fp32 = std::max(z.largest_fp32, Mul(capacity, 4));
      if (!in.grads_in_compute_chunks) {
        z.grad[c] = Mul(capacity, GradElementBytes(in));
        z.largest_grad = std::max(z.largest_grad, z.grad[c]);
      }
    }
    if (c % in.world_size != in.rank) continue;
    ++p.owned_chunks;
    p.frozen_chunks += frozen ? 1 : 0;
    p.compute_bytes = Add(p.compute_bytes, z.compute[c]);
    if (!in.grads_in_compute_chunks && !frozen) p.grad_bytes = Add(p.grad_bytes, Mul(capacity, GradElementBytes(in)));
  }
  return z;
}

// Device bytes of one block's working set, `chunks` the chunks it uses; `buffers`: of
// which ZeRO's gathered and gradient buffers.
int64_t WorkingSetBytes(const ChunkLayout& layout, const TierPlanInput& in, const ChunkSizes& z,
                        const std::set<int>& chunks, bool zero, int64_t& buffers, int64_t& grad_slots) {
  const int64_t world = in.world_size;
  int64_t bytes = 0;
  buffers = 0;
  grad_slots = 0;
  if (!zero) {
    for (int c : chunks) {
      bytes += z.compute[c];  // <= compute_bytes, which did not overflow
      if (in.block_major_grads && !layout.chunks()[c].frozen) {
        grad_slots = Add(grad_slots, Mul(layout.chunks()[c].capacity_numel, GradElementBytes(in)));
      }
    }
    return Add(bytes, grad_slots);
  }
  std::set<int64_t> groups;
  for (int c : chunks) groups.insert(c / world);
  for (int64_t g : groups) {
    int64_t widest = 0;  // a group's chunks are gathered as world_size slots of its widest
    for (int64_t c = g * world; c < (g + 1) * world; ++c) widest = std::max(widest, layout.chunks()[c].capacity_numel);
    const int64_t gathered = Mul(Mul(widest, world), in.compute_element_bytes);
    const int64_t grads = Mul(Mul(widest, world), 4);
    buffers = Add(buffers, Add(gathered, grads));
    bytes = Add(bytes, z.compute[g * world + in.rank]);  // the owned chunk, the gather's input
  }
  return Add(bytes, buffers);
}

// The largest block working set: the chunks of block b's parameters plus the chunks of
// shared parameters (in use from their first access through backward); ZeRO with
// prefetch: blocks b and b + 1 together (forward gathers b + 1 during b, backward b
// during b + 1).
void PlanWorkingSet(const ChunkLayout& layout, const std::vector<std::vector<int>>& used_by_blocks,
                    const TierPlanInput& in, const ChunkSizes& z, TierPlan& p) {
  std::set<int> shared;
  int max_block = 0;
  for (size_t i = 0; i < used_by_blocks.size(); ++i) {
    if (used_by_blocks[i].size() > 1) shared.insert(layout.placements()[i].chunk_id);
    for (int b : used_by_blocks[i]) max_block = std::max(max_block, b);
  }
  const bool zero = in.world_size > 1 || in.zero;
  const int span = zero && in.prefetch_groups ? 2 : 1;
  for (int b = 0; b <= max_block; ++b) {
    std::set<int> chunks = shared;
    for (size_t i = 0; i < used_by_blocks.size(); ++i) {
      for (int u : used_by_blocks[i]) {
        if (u >= b && u < b + span) chunks.insert(layout.placements()[i].chunk_id);
      }
    }
    int64_t buffers = 0, grad_slots = 0;
    const int64_t bytes = WorkingSetBytes(layout, in, z, chunks, zero, buffers, grad_slots);
    if (bytes > p.working_set_bytes) {
      p.working_set_bytes = bytes;
      p.group_buffer_bytes = buffers;
      p.working_set_grad_bytes = grad_slots;
    }
  }
}

// Optimizer state into the device margin, in layout order; then the tiers' totals.
void PlaceOptimizerState(const TierPlanInput& in, const ChunkSizes& z, int64_t room, TierPlan& p) {
  const int n = static_cast<int>(z.optimizer.size());
  auto owned = [&](int c) { return c % in.world_size == in.rank; };
  p.optimizer_on_device.assign(n, false);
  // The device update's scratch (update_scratch.h: slices of at most the largest chunk)
  // is kept off the margin before any optimizer state goes there.
  const int64_t scratch = DeviceUpdateScratchBytes(std::min(kDeviceUpdateSliceNumel, z.largest_fp32 / 4),
                                                   in.state_element_bytes, in.compute_element_bytes, in.master_weights);
  if (in.margin_use_ratio > 0 && room > p.working_set_bytes + scratch) {
    double allowed = in.margin_use_ratio * static_cast<double>(room - p.working_set_bytes - scratch);
    for (int c = 0; c < n; ++c) {
      // Frozen chunks (no optimizer state) are never placed.
      if (!owned(c) || z.optimizer[c] == 0 || static_cast<double>(z.optimizer[c]) > allowed) continue;
      allowed -= static_cast<double>(z.optimizer[c]);
      p.optimizer_on_device[c] = true;
      ++p.device_optimizer_chunks;
      p.device_optimizer_bytes += z.optimizer[c];
    }
  }
  int64_t all_optimizer = 0;
  for (int c = 0; c < n; ++c) {
    if (owned(c)) all_optimizer = Add(all_optimizer, z.optimizer[c]);
  }
  if (p.device_optimizer_chunks > 0) p.device_scratch_bytes = scratch;
  p.host_optimizer_bytes = all_optimizer - p.device_optimizer_bytes;
  const int64_t compute_room = std::max<int64_t>(0, room - p.device_optimizer_bytes);
  p.device_bytes = p.device_optimizer_bytes + std::min(p.compute_bytes, compute_room);
  if (in.warmup_share_bytes > 0) {
    p.warmup_device_bytes = p.device_optimizer_bytes + std::min(in.warmup_share_bytes, compute_room);
  }
  p.speculation_slots =
      std::min<int64_t>(in.speculation_slots, p.owned_chunks - p.frozen_chunks - p.device_optimizer_chunks);
  // Backups counted in fp32 chunks of the largest chunk, rounded up.
  const int64_t backup_chunks = (Mul(p.speculation_slots, in.backup_bytes_per_element) + 3) / 4;
  p.host_scratch_bytes = Add(Mul(in.host_scratch_chunks, z.largest_grad), Mul(backup_chunks, z.largest_fp32));
}

}  // namespace

std::vector<bool> KeepDeviceGrads(int64_t room_bytes, int64_t staging_bytes, bool host_updated,
                                  const std::vector<int64_t>& grad_bytes) {
  int64_t all = 0;
  for (const int64_t b : grad_bytes) all = Add(all, b);
  int64_t left = !host_updated && all <= room_bytes ? room_bytes : room_bytes - staging_bytes;
  std::vector<bool> keep(grad_bytes.size(), false);
  for (size_t i = 0; i < grad_bytes.size(); ++i) {
    if (grad_bytes[i] > left) continue;
    keep[i] = true;
    left -= grad_bytes[i];
  }
  return keep;
}

namespace {

// Gradient chunks of the chunks updated on the device (KeepDeviceGrads): the room is the
// device's beside the working set's compute chunks and that state; the staging slots are
// the flush slots and, with the vertical schedule, the busiest block's gradient slots
// (the working set's part). As GradSink::PinToDevice, whose chunk budget the update's
// scratch is outside of.
void PlaceDeviceGrads(const TierPlanInput& in, const ChunkSizes& z, int64_t room, TierPlan& p) {
  p.device_grad_chunks = 0;
  p.crossing_grad_bytes = 0;
  if (in.grads_in_compute_chunks || p.device_optimizer_chunks == 0) return;
  const bool host_updated = p.device_optimizer_chunks < p.owned_chunks - p.frozen_chunks;
  std::vector<int64_t> candidates;
  for (int c = 0; c < static_cast<int>(p.optimizer_on_device.size()); ++c) {
    if (p.optimizer_on_device[c]) candidates.push_back(z.grad[c]);
  }
  const std::vector<bool> keep =
      KeepDeviceGrads(room - p.working_set_bytes + p.working_set_grad_bytes - p.device_optimizer_bytes,
                      Add(Mul(kGradSinkSlots, z.largest_grad), p.working_set_grad_bytes), host_updated, candidates);
  for (size_t i = 0; i < keep.size(); ++i) {
    if (keep[i]) ++p.device_grad_chunks;
    else p.crossing_grad_bytes = Add(p.crossing_grad_bytes, candidates[i]);
  }
}

// The NVMe tier: of the host-updated chunks, those whose state host memory does not keep
// go to the file; the ring's slots are the largest of those. Host memory keeps the
// largest chunks first (so the slots are as small as the host allows), chunks of one
// size in layout order, while their state fits; the keep budget depends on the ring, so
// the choice is made again with each larger slot until it settles.
// Then the host's totals.
void PlaceNvme(const ChunkLayout& layout, const TierPlanInput& in, const ChunkSizes& z, TierPlan& p) {
  const int n = static_cast<int>(z.optimizer.size());
  p.optimizer_on_nvme.assign(n, false);
  if (in.nvme) {
    std::vector<int> keep_order;  // the largest first; chunks of one size in layout order
    for (int c = 0; c < n; ++c) {
      if (c % in.world_size == in.rank && z.optimizer[c] > 0 && !p.optimizer_on_device[c]) keep_order.push_back(c);
    }
    std::stable_sort(keep_order.begin(), keep_order.end(), [&](int a, int b) { return z.optimizer[a] > z.optimizer[b]; });
    std::vector<int64_t> file_bytes(n, 0);  // [chunk] its state's bytes in the file
    for (int c : keep_order) file_bytes[c] = NvmeChunkBytes(layout.chunks()[c].capacity_numel, in);
    int64_t slot = 0;     // the ring's slot: the largest chunk on the tier
    int64_t on_tier = 0;  // the chunks on the tier, whose count bounds the ring's slots
    for (int settle = 0; settle <= 2 * n + 1; ++settle) {
      const int64_t ring = slot > 0 ? NvmeRingBytes(NvmeRingSlots(in.nvme_ring_slots, on_tier), slot) : 0;
      int64_t keep = in.nvme_host_budget_bytes;
      if (keep < 0) {
        const int64_t others = Add(Add(Add(Add(p.compute_bytes, p.grad_bytes), p.host_scratch_bytes), in.host_param_bytes), ring);
        keep = std::max<int64_t>(0, in.host_budget_bytes - others);
      }
      int64_t largest = 0, count = 0;
      for (int c : keep_order) {
        p.optimizer_on_nvme[c] = z.optimizer[c] > keep;
        if (!p.optimizer_on_nvme[c]) {
          keep -= z.optimizer[c];
        } else {
          largest = std::max(largest, file_bytes[c]);
          ++count;
        }
      }
      if (largest <= slot && count <= on_tier) break;  // the ring assumed holds every chunk on the tier
      slot = std::max(slot, largest);
      on_tier = std::max(on_tier, count);
    }
    for (int c : keep_order) {
      if (!p.optimizer_on_nvme[c]) continue;
      ++p.nvme_chunks;
      p.nvme_bytes = Add(p.nvme_bytes, file_bytes[c]);
      p.host_optimizer_bytes -= z.optimizer[c];
    }
    if (p.nvme_chunks > 0) {
      p.nvme_ring_slots = NvmeRingSlots(in.nvme_ring_slots, p.nvme_chunks);
      p.nvme_ring_bytes = NvmeRingBytes(p.nvme_ring_slots, slot);
    }
  }
  p.host_chunk_bytes = Add(Add(Add(Add(p.compute_bytes, p.grad_bytes), p.host_optimizer_bytes), p.host_scratch_bytes),
                           p.nvme_ring_bytes);
  p.host_bytes = Add(p.host_chunk_bytes, in.host_param_bytes);
}

// Why the plan does not fit (empty when it does).
std::string WhyNot(const TierPlanInput& in, int64_t room, const TierPlan& p) {
  if (p.working_set_bytes > room) {
    return in.device_room_name + " leaves " + Bytes(room) + " for chunks, " + Bytes(p.working_set_bytes - room) +
           " short of the largest block working set of " + Bytes(p.working_set_bytes) +
           " (lower chunk.size_elements or raise the device budget)";
  }
  if (p.host_bytes <= in.host_budget_bytes) return "";
  std::string parts = "compute chunks " + Bytes(p.compute_bytes);
  if (p.grad_bytes > 0) parts += ", fp32 grad chunks " + Bytes(p.grad_bytes);
  if (p.host_scratch_bytes > 0) parts += ", gradient landing buffers " + Bytes(p.host_scratch_bytes);
  parts += ", optimizer state of " + std::to_string(p.owned_chunks - p.device_optimizer_chunks - p.nvme_chunks) +
           " of " + std::to_string(p.owned_chunks) + " chunks " + Bytes(p.host_optimizer_bytes);
  if (p.nvme_chunks > 0) {
    parts += ", the NVMe tier's ring " + Bytes(p.nvme_ring_bytes) + " (the state of " + std::to_string(p.nvme_chunks) +
             " chunks in the file, " + Bytes(p.nvme_bytes) + ")";
  }
  if (in.host_param_bytes > 0) parts += ", parameters outside the chunks " + Bytes(in.host_param_bytes);
  return "the host budget of " + Bytes(in.host_budget_bytes) + " is " + Bytes(p.host_bytes - in.host_budget_bytes) +
         " short: the host holds " + Bytes(p.host_bytes) + " from start-up (" + parts +
         "; the device holds the optimizer state of " + std::to_string(p.device_optimizer_chunks) + " chunks, " +
         Bytes(p.device_optimizer_bytes) + ") (raise chunk.host_budget_bytes or give the optimizer more device memory)";
}

}  // namespace

int64_t OptimizerChunkBytes(int64_t capacity, const TierPlanInput& in) {
  return Add(Mul(2, MomentBytes(capacity, in)), Mul(capacity, SeparateMasterBytes(in)));
}

int64_t NvmeChunkBytes(int64_t capacity, const TierPlanInput& in) {
  return NvmePartsOf(Mul(capacity, SeparateMasterBytes(in)), MomentBytes(capacity, in)).extent_bytes;
}

TierPlan PlanTiers(const ChunkLayout& layout, const std::vector<std::vector<int>>& used_by_blocks,
                   const TierPlanInput& in) {
  TORCH_CHECK(used_by_blocks.size() == layout.placements().size(), "tier plan: ", used_by_blocks.size(),
              " parameters' blocks for a layout of ", layout.placements().size());
  const int64_t world = in.world_size;
  TORCH_CHECK(world >= 1 && in.rank >= 0 && in.rank < world, "tier plan: rank ", in.rank, " of world size ", world);
  TORCH_CHECK(layout.num_chunks() % world == 0, "tier plan: ", layout.num_chunks(),
              " chunks are not a multiple of the world size ", world, " (plan the layout with it)");
  TierPlan p;
  const ChunkSizes sizes = SizeChunks(layout, in, p);
  PlanWorkingSet(layout, used_by_blocks, in, sizes, p);
  const int64_t room = std::min(in.device_budget_bytes,
                                in.device_chunk_room_bytes >= 0 ? in.device_chunk_room_bytes : in.device_budget_bytes);
  PlaceOptimizerState(in, sizes, room, p);
  PlaceDeviceGrads(in, sizes, room, p);
  PlaceNvme(layout, in, sizes, p);
  p.why_not = WhyNot(in, room, p);
  return p;
}

}  // namespace ps::chunkmem
