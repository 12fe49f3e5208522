#include "chunkmem/chunk_allocation.h"

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <chrono>
#include <optional>

#include "base/parallel_tasks.h"
#include "base/staging_arena.h"

namespace ps::chunkmem {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

struct Zeroing {
  at::Tensor payload;
  int chunk;  // -1: the whole payload; else zero the gaps between chunk's parameters
};

struct Slots {  // with ChunkValues::initial: where parameter `index`'s values go
  int index;
  at::Tensor master, compute;  // master undefined: a frozen parameter (compute alone)
};

at::Tensor SlotView(const at::Tensor& payload, const ChunkAllocation& r, int index) {
  const auto& pl = r.layout.placements()[index];
  return payload.narrow(0, pl.offset_numel, pl.numel).view(r.shapes[index]);
}

at::Tensor SlotView(const ChunkStore& store, const ChunkAllocation& r, int id, int index) {
  return SlotView(store.payload(id), r, index);
}

bool OnNvme(const ChunkAllocation& r, int c) { return !r.optimizer_on_nvme.empty() && r.optimizer_on_nvme[c]; }

bool MasterOfItsOwn(const ChunkAllocation& r) { return SeparateMaster(r.compute_dtype, r.master_weights); }

// Chunk `c`'s payloads; `zeroing` gets what must be zeroed. Optimizer state on the NVMe
// tier gets an entry without payload.
ChunkIds AddPayloads(ChunkStore& store, const ChunkAllocation& r, int c, std::vector<Zeroing>& zeroing) {
  ChunkIds ids;
  ids.fill(-1);
  const auto& chunk = r.layout.chunks()[c];
  const int compute = static_cast<int>(ChunkKind::kCompute);
  if (!r.owned[c]) {  // ZeRO: only a compute entry, never given a payload (gathered views instead)
    ids[compute] = store.Add(chunk.capacity_numel, r.compute_dtype);
    return ids;
  }
  const Tier optimizer_tier = r.optimizer_on_device[c] ? Tier::kDevice : Tier::kHost;
  auto add = [&](at::ScalarType dtype, Tier tier, bool holds_values, int64_t numel) {
    const int id = store.Add(numel, dtype);
    store.Allocate(id, tier, /*zero=*/false);  // zeroed later: m, v and grads start at 0
    zeroing.push_back({store.payload(id), holds_values ? c : -1});
    return id;
  };
  auto add_state = [&](at::ScalarType dtype, bool holds_values, int64_t numel) {
    return OnNvme(r, c) ? store.Add(numel, dtype) : add(dtype, optimizer_tier, holds_values, numel);
  };
  const int64_t capacity = chunk.capacity_numel, state = StatePayloadNumel(capacity, r.state_dtype);
  ids[compute] = add(r.compute_dtype, Tier::kHost, true, capacity);
  if (chunk.frozen) return ids;  // the compute kind alone: no gradient, master or moments
  ids[static_cast<int>(ChunkKind::kGrad)] =
      r.grads_in_compute_chunks ? ids[compute]
                                : add(GradChunkDtype(r.compute_dtype, r.master_weights), Tier::kHost, false, capacity);
  ids[static_cast<int>(ChunkKind::kMaster)] = MasterOfItsOwn(r) ? add_state(at::kFloat, true, capacity) : ids[compute];
  ids[static_cast<int>(ChunkKind::kAdamM)] = add_state(r.state_dtype, false, state);  // zeroed: all moments 0
  ids[static_cast<int>(ChunkKind::kAdamV)] = add_state(r.state_dtype, false, state);
  return ids;
}

void ZeroPayloads(const ChunkLayout& layout, std::vector<Zeroing>& zeroing) {
  std::vector<int64_t> sizes;  // bytes each task zeroes: a value-holding payload only its gaps and tail
  for (const Zeroing& z : zeroing) {
    int64_t numel = z.payload.numel();
    if (z.chunk >= 0) {
      for (int index : layout.chunks()[z.chunk].param_indices) numel -= layout.placements()[index].numel;
    }
    sizes.push_back(numel * static_cast<int64_t>(z.payload.element_size()));
  }
  const std::vector<int64_t> order = ps::base::LargestFirst(sizes);
  ps::base::ParallelTasks(static_cast<int64_t>(order.size()), at::get_num_threads(), [&](int64_t task, int) {
    const int64_t i = order[task];
    at::Tensor& payload = zeroing[i].payload;
    if (zeroing[i].chunk < 0) {
      payload.zero_();
      return;
    }
    const ChunkSpec& spec = layout.chunks()[zeroing[i].chunk];
    int64_t from = 0;  // parameters lie in offset order (ChunkSpec::param_indices)
    for (int index : spec.param_indices) {
      const ParamPlacement& pl = layout.placements()[index];
      if (pl.offset_numel > from) payload.narrow(0, from, pl.offset_numel - from).zero_();
      from = pl.offset_numel + pl.numel;
    }
    if (payload.numel() > spec.used_numel) payload.narrow(0, spec.used_numel, payload.numel() - spec.used_numel).zero_();
  });
}

// Where slot `f`'s values are written: in place for a fp32 master on the host (or the
// simulated device, host memory too), else through host fp32 staging (a master on a CUDA
// device, or a frozen parameter's compute slot, rounded when copied).
const at::Tensor& TargetOf(const Slots& f) { return f.master.defined() ? f.master : f.compute; }
bool Staged(const at::Tensor& target) { return !target.device().is_cpu() || target.scalar_type() != at::kFloat; }

// One parameter per task: each depends on the parameter alone (models/param_init.h), so
// the order and the threads do not matter: the largest first, on run.threads threads,
// each taking the next when free. Staged values go through one arena shared by the
// threads (base/staging_arena.h; its pages reused): room for one second-largest staged
// slot per thread, at most the largest; a larger slot gets a buffer of its own while the
// others wait. So staging never holds more than the largest staged slot.
void WriteInitialValues(const std::vector<Slots>& fill, const ChunkValues& values, bool separate_master) {
  std::vector<int64_t> sizes;
  for (const Slots& f : fill) sizes.push_back(f.compute.numel());
  const std::vector<int64_t> order = ps::base::LargestFirst(sizes);
  std::vector<int64_t> staged;  // numel of each staged slot
  for (const Slots& f : fill) {
    if (Staged(TargetOf(f))) staged.push_back(TargetOf(f).numel());
  }
  std::sort(staged.rbegin(), staged.rend());
  const int64_t threads = at::get_num_threads();
  const int64_t arena_numel = staged.empty()        ? 0
                              : staged.size() == 1 ? staged[0]
                                                   : std::min(staged[0], threads * staged[1]);
  ps::base::StagingArena staging(arena_numel);
  ps::base::ParallelTasks(static_cast<int64_t>(order.size()), static_cast<int>(threads), [&](int64_t task, int) {
    const Slots& f = fill[order[task]];
    const at::Tensor& target = TargetOf(f);
    std::optional<ps::base::StagingArena::Lease> lease;
    if (Staged(target)) lease.emplace(staging.Take(target.numel()));
    const at::Tensor v = lease ? lease->values().view(target.sizes()) : target;
    if (!values.initial(f.index, v)) v.zero_();
    if (!v.is_same(target)) target.copy_(v);
    if (separate_master && f.master.defined()) f.compute.copy_(v);
  });
}

}  // namespace

std::vector<ChunkIds> AllocateChunks(ChunkStore& store, const ChunkAllocation& r, const ChunkValues& values,
                                     const std::function<void(int chunk)>& filled, StartupSeconds* seconds) {
  at::NoGradGuard no_grad;
  const bool separate_master = MasterOfItsOwn(r);
  std::vector<ChunkIds> ids;
  std::vector<Zeroing> zeroing;
  std::vector<Slots> fill;
  const auto allocate_start = Clock::now();
  for (int c = 0; c < r.layout.num_chunks(); ++c) {
    ids.push_back(AddPayloads(store, r, c, zeroing));
    const ChunkIds& cid = ids.back();
    if (OnNvme(r, c) && separate_master) continue;  // WriteNvmeChunks: values and `filled`
    for (int index : r.layout.chunks()[c].param_indices) {
      if (!r.owned[c]) break;
      const int master_id = cid[static_cast<int>(ChunkKind::kMaster)];  // -1: frozen
      const at::Tensor compute = SlotView(store, r, cid[static_cast<int>(ChunkKind::kCompute)], index);
      const at::Tensor master = master_id < 0 ? at::Tensor() : SlotView(store, r, master_id, index);
      if (values.initial) {  // written on many threads below, after the zeroing
        fill.push_back({index, master, compute});
        continue;
      }
      const at::Tensor current = values.current(index);
      compute.copy_(current);
      if (separate_master && master.defined()) master.copy_(current);
    }
    filled(c);
  }
  const auto zero_start = Clock::now();
  seconds->allocate_s = std::chrono::duration<double>(zero_start - allocate_start).count();
  ZeroPayloads(r.layout, zeroing);
  zeroing.clear();
  const auto values_start = Clock::now();
  seconds->zero_s = std::chrono::duration<double>(values_start - zero_start).count();
  if (values.initial) WriteInitialValues(fill, values, separate_master);
  seconds->initial_values_s = SecondsSince(values_start);
  return ids;
}

void WriteNvmeChunks(ChunkStore& store, const ChunkAllocation& r, const std::vector<ChunkIds>& ids,
                     const ChunkValues& values, NvmeState& nvme, const std::function<void(int chunk)>& filled,
                     StartupSeconds* seconds) {
  at::NoGradGuard no_grad;
  const auto start = Clock::now();
  for (int c = 0; c < r.layout.num_chunks(); ++c) {
    if (!OnNvme(r, c)) continue;
    NvmeMount mount(nvme, c, /*read=*/false);  // every byte written below; the file gets them on release
    mount.set_written();
    store.payload(ids[c][static_cast<int>(ChunkKind::kAdamM)]).zero_();
    store.payload(ids[c][static_cast<int>(ChunkKind::kAdamV)]).zero_();
    if (!MasterOfItsOwn(r)) continue;  // the master is the compute chunk: AllocateChunks wrote it
    const int master_id = ids[c][static_cast<int>(ChunkKind::kMaster)];
    const int compute_id = ids[c][static_cast<int>(ChunkKind::kCompute)];
    store.payload(master_id).zero_();  // the gaps between parameters, and what is not written
    const std::vector<int>& params = r.layout.chunks()[c].param_indices;
    const at::Tensor master_payload = store.payload(master_id), compute_payload = store.payload(compute_id);
    ps::base::ParallelTasks(static_cast<int64_t>(params.size()), at::get_num_threads(), [&](int64_t k, int) {
      const int index = params[k];
      const at::Tensor master = SlotView(master_payload, r, index);  // fp32, host, contiguous
      if (values.initial) {
        if (!values.initial(index, master)) master.zero_();
      } else {
        master.copy_(values.current(index));
      }
      SlotView(compute_payload, r, index).copy_(master);
    });
    filled(c);
  }
  seconds->initial_values_s += SecondsSince(start);
}

}  // namespace ps::chunkmem
