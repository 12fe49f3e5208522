#include "chunkmem/memory_plan.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdio>
#include <set>

namespace ps::chunkmem {
namespace {

std::string Bytes(double b) {
  char buf[32];
  if (b >= 1e18) return "unlimited";
  if (b >= 1024.0 * 1024 * 1024) {
    std::snprintf(buf, sizeof(buf), "%.2f GiB", b / (1024.0 * 1024 * 1024));
  } else {
    std::snprintf(buf, sizeof(buf), "%.2f MiB", b / (1024.0 * 1024));
  }
  return buf;
}

// Byte counts in int64, checked: a model too large to count is an error, never a
// wrapped (negative) size that then "fits".
int64_t MulBytes(int64_t a, int64_t b) {
  int64_t out = 0;
  TORCH_CHECK(!__builtin_mul_overflow(a, b, &out), "memory plan: ", a, " x ", b,
              " bytes overflows int64; the model is too large to plan");
  return out;
}

int64_t AddBytes(int64_t a, int64_t b) {
  int64_t out = 0;
  TORCH_CHECK(!__builtin_add_overflow(a, b, &out), "memory plan: ", a, " + ", b,
              " bytes overflows int64; the model is too large to plan");
  return out;
}

// "8" or "6.03": bytes per element as printed by the plan.
std::string PerElement(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), bytes == static_cast<double>(static_cast<int64_t>(bytes)) ? "%.0f" : "%.2f", bytes);
  return buf;
}

}  // namespace

TierPlanInput TierPlanInputOf(const PlanInput& in) {
  TierPlanInput p;
  p.compute_element_bytes = in.compute_element_bytes;
  p.state_element_bytes = in.state_element_bytes;
  p.grads_in_compute_chunks = in.grads_in_compute_chunks;
  p.master_weights = in.master_weights;
  p.block_major_grads = in.block_major_grads;
  p.device_budget_bytes = in.device_capacity_bytes > 0 ? in.device_capacity_bytes : in.device_budget_bytes;
  p.device_chunk_room_bytes = in.device_budget_bytes;
  p.device_room_name = in.device_room_name;
  p.warmup_share_bytes = in.warmup_share_bytes;
  p.host_budget_bytes = in.host_budget_bytes;
  p.host_param_bytes = AddBytes(MulBytes(16, in.host_param_numel), MulBytes(4, in.frozen_host_param_numel));
  p.margin_use_ratio = in.margin_use_ratio;
  p.host_scratch_chunks = in.host_scratch_chunks;
  p.speculation_slots = in.speculation_slots;
  p.backup_bytes_per_element = in.backup_bytes_per_element;
  p.world_size = in.world_size;
  p.rank = in.rank;
  p.zero = in.zero;
  p.prefetch_groups = in.prefetch_groups;
  p.nvme = in.nvme;
  p.nvme_host_budget_bytes = in.nvme_host_budget_bytes;
  p.nvme_ring_slots = in.nvme_ring_slots;
  return p;
}

namespace {

// Largest N (same bytes per parameter): the host holds compute and grad chunks,
// (k + g) N u, and the optimizer state, o N u, less what the device margin takes,
// A = margin_use_ratio x (D - working set): host(N) = (k + g) N u + max(0, o N u - A) <= H,
// u = capacity per parameter. The working set is taken as this model's.
int64_t LargestParamNumel(const MemoryPlan& plan, const PlanInput& in, int64_t capacity, int64_t trainable,
                          double grad_per_element) {
  const double u = static_cast<double>(capacity) / plan.param_numel;
  const double H = static_cast<double>(in.host_budget_bytes) - static_cast<double>(plan.host_param_bytes);
  const double D = static_cast<double>(std::min(TierPlanInputOf(in).device_budget_bytes, in.device_budget_bytes));
  const double A = std::max(0.0, in.margin_use_ratio * (D - static_cast<double>(plan.min_device_bytes)));
  // Per element of capacity, frozen chunks counted at k alone (t: the trainable share).
  const double t = capacity > 0 ? static_cast<double>(trainable) / static_cast<double>(capacity) : 1.0;
  const double kg = static_cast<double>(in.compute_element_bytes) + t * grad_per_element;
  const double o = t * plan.optimizer_bytes_per_element;
  double n = H / (kg * u);
  // The NVMe tier takes what the host does not keep (its ring taken as this model's).
  if (o * n * u > A && !in.nvme) n = (H + A) / ((kg + o) * u);
  if (in.nvme) n = std::max(0.0, H - static_cast<double>(plan.tiers.nvme_ring_bytes)) / (kg * u);
  return static_cast<int64_t>(std::max(0.0, n));
}

}  // namespace

MemoryPlan PlanMemory(const PlanInput& in) {
  MemoryPlan plan;
  std::vector<ParamSpec> specs;
  std::vector<std::vector<int>> used_by;
  for (const auto& p : in.params) {
    specs.push_back({p.name, p.numel, p.used_by_blocks.front(), p.frozen});
    used_by.push_back(p.used_by_blocks);
  }
  const int64_t align = ParamAlignNumel(in.state_element_bytes);
  const int64_t chunk_numel = in.chunk_numel > 0 ? in.chunk_numel : ChooseChunkNumel(specs, in.world_size, align);
  plan.layout = ChunkLayout::Plan(specs, {chunk_numel, in.world_size, align});
  plan.param_numel = plan.layout.param_numel();
  // Of the chunks this rank holds (all of them with one process): capacity, trainable
  // capacity and the trainable chunks' optimizer state.
  int64_t capacity = 0, trainable = 0, optimizer_bytes = 0;
  for (int c = 0; c < plan.layout.num_chunks(); ++c) {
    if (c % in.world_size != in.rank) continue;
    capacity = AddBytes(capacity, plan.layout.chunks()[c].capacity_numel);
    if (!plan.layout.chunks()[c].frozen) trainable = AddBytes(trainable, plan.layout.chunks()[c].capacity_numel);
  }
  const int64_t k = in.compute_element_bytes;
  plan.compute_chunk_bytes = MulBytes(capacity, k);
  for (int c = 0; c < plan.layout.num_chunks(); ++c) {
    if (c % in.world_size != in.rank || plan.layout.chunks()[c].frozen) continue;
    optimizer_bytes = AddBytes(optimizer_bytes, OptimizerChunkBytes(plan.layout.chunks()[c].capacity_numel, TierPlanInputOf(in)));
  }
  const int64_t grad_per_element = in.grads_in_compute_chunks ? 0 : GradElementBytes(TierPlanInputOf(in));
  const double optimizer_per_element = trainable > 0 ? static_cast<double>(optimizer_bytes) / trainable : 0.0;
  plan.optimizer_bytes_per_element = optimizer_per_element;
  // Frozen chunks: the compute kind alone.
  plan.host_only_bytes = AddBytes(MulBytes(trainable, grad_per_element), optimizer_bytes);
  const int64_t model_chunk_bytes = AddBytes(plan.compute_chunk_bytes, plan.host_only_bytes);
  plan.host_param_bytes = AddBytes(MulBytes(16, in.host_param_numel), MulBytes(4, in.frozen_host_param_numel));

  // Where the chunks sit (tier_plan.h): the TierPlan the run's runtime is given.
  plan.tiers = PlanTiers(plan.layout, used_by, TierPlanInputOf(in));
  plan.min_device_bytes = plan.tiers.working_set_bytes;
  plan.device_bytes = plan.tiers.device_bytes;
  plan.host_bytes = plan.tiers.host_bytes;
  plan.bytes_per_param = static_cast<double>(model_chunk_bytes) / plan.param_numel;

  plan.largest_param_numel = LargestParamNumel(plan, in, capacity, trainable, static_cast<double>(grad_per_element));

  plan.why_not = plan.tiers.why_not;
  plan.fits = plan.why_not.empty();
  return plan;
}

namespace {

// The device, optimizer-state, NVMe, warm-up and host lines of the plan.
std::string FormatTiers(const MemoryPlan& p, const PlanInput& in) {
  std::string out;
  const TierPlan& pl = p.tiers;
  out += "device            " + Bytes(static_cast<double>(p.device_bytes)) + " of budget " +
         Bytes(static_cast<double>(in.device_budget_bytes)) + "; needs at least " +
         Bytes(static_cast<double>(p.min_device_bytes)) + " (largest block working set)\n";
  out += "optimizer state   " + std::to_string(pl.device_optimizer_chunks) + " of " +
         std::to_string(pl.owned_chunks) + " chunks on the device from start-up (" +
         Bytes(static_cast<double>(pl.device_optimizer_bytes)) + ", updated there), the rest on the host" +
         (pl.nvme_chunks > 0 ? " (" + std::to_string(pl.nvme_chunks) + " of them in the NVMe tier)\n" : "\n");
  if (pl.grad_bytes > 0 && pl.device_optimizer_chunks > 0) {  // gradients in chunks of their own
    const int n = pl.device_optimizer_chunks, k = pl.device_grad_chunks;
    out += "gradients         " +
           (k == n ? "the gradient chunks of all " + std::to_string(n) + " chunks updated on the device stay there\n"
                   : "room beside that state for the gradient chunks of about " + std::to_string(k) + " of those " +
                         std::to_string(n) + " chunks; the other " + std::to_string(n - k) + " chunks' gradients (" +
                         Bytes(static_cast<double>(pl.crossing_grad_bytes)) +
                         ") cross to the host in backward and back for their update each step (a lower "
                         "chunk.margin_use_ratio keeps more there, and updates fewer chunks on the device)\n");
  }
  if (pl.nvme_chunks > 0) {
    out += "nvme              the optimizer state of " + std::to_string(pl.nvme_chunks) + " chunks in chunk.nvme_dir (" +
           Bytes(static_cast<double>(pl.nvme_bytes)) + "), through a ring of " + std::to_string(pl.nvme_ring_slots) +
           " slots in host memory (" + Bytes(static_cast<double>(pl.nvme_ring_bytes)) + ")\n";
  } else if (in.nvme) {
    out += "nvme              not needed: host memory keeps every host-updated chunk's state\n";
  }
  if (pl.warmup_device_bytes > 0) {
    out += "warm-up           " + Bytes(static_cast<double>(pl.warmup_device_bytes)) +
           " of chunks on the device (optimizer state + the warm-up share), more only for chunks in use\n";
  }
  out += "host              " + Bytes(static_cast<double>(p.host_bytes)) + " of budget " +
         Bytes(static_cast<double>(in.host_budget_bytes)) +
         " (at start-up, its most: every compute chunk is there; chunks only: the process's own memory, "
         "2.2 GiB on an 8B GPU run, and the OS's come on top)\n";
  return out;
}

}  // namespace

std::string FormatPlan(const MemoryPlan& p, const PlanInput& in) {
  char buf[512];
  std::string out;
  std::snprintf(buf, sizeof(buf), "parameters        %.3f B (%lld)\n", p.param_numel / 1e9,
                static_cast<long long>(p.param_numel));
  out += buf;
  out += "chunks            " + p.layout.Summary() + "\n";
  if (in.world_size > 1 || in.zero) {
    out += "ZeRO              rank " + std::to_string(in.rank) + " of " + std::to_string(in.world_size) + " holds " +
           std::to_string(p.tiers.owned_chunks) + " of " + std::to_string(p.layout.num_chunks()) +
           " chunks (figures below are this rank's); group buffers " +
           Bytes(static_cast<double>(p.tiers.group_buffer_bytes)) + " in the largest block working set\n";
  }
  if (p.layout.utilization_ratio() < 0.5) {
    out += "hint              most chunk capacity is padding; chunk.size_elements: auto picks the size with "
           "the least\n";
  }
  out += "compute chunks    " + Bytes(static_cast<double>(p.compute_chunk_bytes)) + " (" +
         std::to_string(in.compute_element_bytes) + " bytes/element; move between device and host)\n";
  out += std::string(in.grads_in_compute_chunks ? "master+m+v        "
                     : in.master_weights       ? "grad+master+m+v   "
                                               : "grad+m+v          ") +
         Bytes(static_cast<double>(p.host_only_bytes)) + " (host; optimizer state " +
         PerElement(p.optimizer_bytes_per_element) + " bytes/element, m and v " +
         (in.state_element_bytes == 1 ? "int8" : in.state_element_bytes == 2 ? "bf16" : "fp32") + ")" +
         (in.grads_in_compute_chunks ? "; gradients reuse the compute slots\n"
          : in.master_weights        ? "\n"
                                     : "; no fp32 master: bf16 weights and gradients\n");
  if (p.host_param_bytes > 0) {
    out += "outside chunks    " + Bytes(static_cast<double>(p.host_param_bytes)) + " (" +
           std::to_string(in.host_param_numel) + " fp32 host parameters: value, grad, m, v; " +
           std::to_string(in.frozen_host_param_numel) + " frozen: the value)\n";
  }
  std::snprintf(buf, sizeof(buf), "model data        %s in chunks = %.2f bytes/chunked parameter%s\n",
                Bytes(static_cast<double>(p.compute_chunk_bytes + p.host_only_bytes)).c_str(), p.bytes_per_param,
                p.host_param_bytes > 0 ? " (plus the parameters outside chunks)" : "");
  out += buf;
  if (in.non_model_bytes > 0) {
    out += "activations       ~" + Bytes(static_cast<double>(in.non_model_bytes)) + " (" + in.non_model_note + ")\n";
  }
  out += FormatTiers(p, in);
  std::snprintf(buf, sizeof(buf), "largest model     %.3f B parameters in these budgets (same bytes/parameter)\n",
                p.largest_param_numel / 1e9);
  out += buf;
  out += p.fits ? "fits              yes\n" : "fits              NO: " + p.why_not + "\n";
  return out;
}



}  // namespace ps::chunkmem
