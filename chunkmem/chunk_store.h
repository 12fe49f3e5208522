// ChunkStore: the payloads of all chunks, in two tiers with exact byte budgets.
//
// Host tier: pinned host memory when CUDA is available, plain host memory otherwise;
// in a run, a pool reserved once at the plan's host figure (MakeHostPoolAllocator), in
// which every chunk that has lived on the host keeps its slot while it is on the device,
// so a chunk always comes back to the same bytes and the pool never fragments.
// Device tier: CUDA memory, or a simulated device (host memory with its own budget and
// real copies) so the same residency code runs, and is tested, without a GPU.
// The store never exceeds a tier's budget: Allocate/Move throw instead, and the runtime
// evicts first. Counters of bytes and copies moved, host waits and peaks are kept as
// data (StoreStats). Scratch payloads (Borrow: the runtime's gradient staging slots
// and landing buffers) count against a tier's budget like chunks but are not chunks.
// Single-threaded: the training thread owns it.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "chunkmem/chunk_config.h"

namespace ps::chunkmem {

class CopyEngine;
class CopyTicket;
class DeviceMemoryProbe;

enum class Tier { kNone, kHost, kDevice };
const char* ToString(Tier t);

// Allocates payload tensors of one tier.
class TierAllocator {
 public:
  virtual ~TierAllocator() = default;
  virtual at::Tensor Allocate(int64_t numel, at::ScalarType dtype) = 0;  // uninitialised
  // A payload that will stay (an arena places it apart from the moving ones).
  virtual at::Tensor AllocateLongLived(int64_t numel, at::ScalarType dtype) { return Allocate(numel, dtype); }
  virtual at::Device device() const = 0;
  // Whether a payload of `bytes` can be placed now (an arena may be fragmented).
  virtual bool CanFit(int64_t bytes) const { return true; }
  // A reservation (arena, pool): its bytes, the most of them in payloads at once, and
  // its largest free range; 0, 0 and "no limit" for per-payload allocation.
  virtual int64_t reserved_bytes() const { return 0; }
  virtual int64_t peak_used_bytes() const { return 0; }
  virtual int64_t largest_free_bytes() const { return INT64_MAX; }
  // Whether a chunk keeps its payload's slot here while it is on the other tier, and
  // comes back into it (the host pool: it holds room for every such chunk anyway).
  virtual bool keeps_home_slots() const { return false; }
};

// Host memory, pinned if `pinned` (needs a CUDA runtime).
std::unique_ptr<TierAllocator> MakeHostAllocator(bool pinned);
// Memory of `device` (a CUDA device, or the CPU for the simulated device tier).
std::unique_ptr<TierAllocator> MakeDeviceAllocator(at::Device device);
// `bytes` of `device` reserved once (DeviceArena) and carved into payloads.
std::unique_ptr<TierAllocator> MakeArenaAllocator(at::Device device, int64_t bytes);
// The host pool: `bytes` of host memory (pinned if `pinned`, CUDA builds: one
// cudaHostAlloc, or with HostPoolPinning::kRegister mapped, made resident on many
// threads and registered) reserved once, plus the arena's rounding of at most
// `max_payloads` payloads up to 64 bytes each (HostPoolSlackBytes), carved into payloads;
// chunks keep their slot while on the device (keeps_home_slots). Size it to the most
// chunk bytes the host holds (TierPlan::host_chunk_bytes). A size that cannot be
// reserved throws c10::Error naming the bytes.
std::unique_ptr<TierAllocator> MakeHostPoolAllocator(bool pinned, int64_t bytes, int64_t max_payloads,
                                                     HostPoolPinning pinning = HostPoolPinning::kHostAlloc);

// The most payloads a run's host pool holds for a layout of `chunks` chunks: a home slot
// per chunk and kind (five kinds, chunk_allocation.h), speculation backups and the NVMe
// ring's slots (together at most one per chunk and kind again), and up to 1,024 buffers
// besides (gradient landing buffers).
constexpr int64_t HostPoolMaxPayloads(int64_t chunks) { return 2 * 5 * chunks + 1024; }
// What the pool reserves above its payload bytes for them: the arena rounds each up to
// DeviceArena::kAlignBytes (64), so at most 63 bytes each, far
// below the 1/64 of the bytes a bound by size would take (1 GiB of a 64 GiB pool).
constexpr int64_t HostPoolSlackBytes(int64_t chunks) { return 64 * HostPoolMaxPayloads(chunks); }

struct StoreStats {
  int64_t host_bytes = 0;         // payload bytes held now
  int64_t device_bytes = 0;
  int64_t peak_host_bytes = 0;    // since the last ResetPeaks()
  int64_t peak_device_bytes = 0;
  int64_t h2d_bytes = 0;          // cumulative bytes copied host -> device
  int64_t d2h_bytes = 0;          // cumulative bytes copied device -> host
  int64_t h2d_copies = 0;         // cumulative copies host -> device (moves, prefetches)
  int64_t d2h_copies = 0;         // cumulative copies device -> host (evictions, gradient flushes)
  // Cumulative host waits for a copy: each synchronous copy between tiers, and each
  // wait for an asynchronous one (on a GPU, each is a host synchronisation).
  int64_t syncs = 0;
  // The host pool (MakeHostPoolAllocator; 0 without one): its reserved bytes, and the
  // most of them in payloads at once since start (chunk slots and scratch buffers).
  int64_t host_pool_bytes = 0;
  int64_t peak_host_pool_used_bytes = 0;
};

class ChunkStore {
 public:
  ChunkStore(std::unique_ptr<TierAllocator> host, std::unique_ptr<TierAllocator> device,
             int64_t host_budget_bytes, int64_t device_budget_bytes);
  ~ChunkStore();  // waits for copies in flight
  ChunkStore(const ChunkStore&) = delete;
  ChunkStore& operator=(const ChunkStore&) = delete;

  // Registers a chunk without a payload; returns its id (dense, from 0).
  int Add(int64_t capacity_numel, at::ScalarType dtype);

  int num_chunks() const { return static_cast<int>(chunks_.size()); }
  Tier tier(int id) const { return chunks_.at(id).tier; }
  // 1-D; waits for a copy into it still in flight (MoveAsync).
  const at::Tensor& payload(int id) const;
  int64_t chunk_bytes(int id) const;
  at::ScalarType dtype(int id) const { return chunks_.at(id).dtype; }

  // Within the tier's budget, and placeable (an arena may need more eviction first).
  bool CanHold(Tier tier, int64_t bytes) const;
  int64_t BytesUsed(Tier tier) const;
  int64_t Budget(Tier tier) const;

  // Gives chunk `id` (without payload) a zero-filled payload on `tier`; `zero` false:
  // uninitialised, for a caller that writes every element itself (start-up fills
  // payloads on many threads: ChunkRuntime's constructor).
  void Allocate(int id, Tier tier, bool zero = true);
  // Copies the payload to `to` and frees the old one; bytes are preserved exactly.
  // `long_lived`: the chunk will stay there (the optimizer's device chunks).
  void Move(int id, Tier to, bool long_lived = false);
  // Like Move, but the copy runs on the copy engine (if any) while the caller goes on;
  // the first payload(id), Move or Free of the chunk waits for it. Accounting is
  // immediate, as for Move.
  void MoveAsync(int id, Tier to);
  // Drops the payload (and its host slot).
  void Free(int id);
  // Hands over the copy still in flight into `id`'s payload (MoveAsync; null if none):
  // payload(id) no longer waits for it, so the caller waits on the ticket (on any
  // thread) before reading or writing the payload, and keeps the chunk from moving or
  // being freed until then. Counted as a wait.
  std::shared_ptr<CopyTicket> TakePendingCopy(int id);
  // Frees the sources of finished copies still unwaited (pending, or handed over by
  // TakePendingCopy): a device payload moved out is counted as gone at once, and this
  // makes its memory free too, without blocking (CopyTicket::ReleaseIfDone).
  void ReleaseFinishedCopies();

  // The NVMe tier (docs/chunkmem.md, "NVMe tier"): chunk `id` (without payload) keeps
  // its bytes in the tier's file (chunkmem/nvme_state.h); it has a payload only while
  // mounted: a view of a ring slot (host memory, same numel and dtype), not counted
  // against a budget (the ring's slots are, borrowed once). Its tier stays kNone; its
  // payload() while not mounted throws.
  void MarkNvme(int id);
  bool on_nvme(int id) const { return chunks_.at(id).nvme; }
  void Mount(int id, at::Tensor view);
  void Unmount(int id);

  // A scratch payload on `tier` (zero-filled if `zero`), counted against the tier's
  // budget like a chunk until GiveBack; throws if the budget cannot take it (check
  // CanHold first). Not model data and not a chunk id.
  at::Tensor Borrow(Tier tier, int64_t numel, at::ScalarType dtype, bool zero);
  // Returns a Borrow()ed payload of `tier` and resets `scratch`.
  void GiveBack(Tier tier, at::Tensor& scratch);
  // Copies `src` (device tier) into `dst` (host tier, same numel and dtype), counted:
  // on the copy engine when there is one (the ticket is returned; `dst` may be read
  // after Wait), else at once (null ticket; counted as a wait).
  std::shared_ptr<CopyTicket> CopyToHost(at::Tensor dst, at::Tensor src);
  // The other way: `src` (host tier) into `dst` (a range of a device-tier payload),
  // counted as a host-to-device copy; `dst` is complete after Wait (or at once).
  std::shared_ptr<CopyTicket> CopyToDevice(at::Tensor dst, at::Tensor src);
  // Waits for a CopyToHost or CopyToDevice ticket (counted as a wait).
  void Wait(CopyTicket& ticket);
  // `t` (device tier) as a new host-tier tensor, synchronously; counted as one copy and
  // one wait (on the simulated tier the tensor itself is returned).
  at::Tensor ToHostSync(const at::Tensor& t);

  at::Device device_of(Tier tier) const;
  // Paused around every payload allocation and free, so the probe never counts chunk
  // bytes as non-model memory. Not owned; null = none.
  void set_memory_probe(DeviceMemoryProbe* probe) { probe_ = probe; }
  // Copies for MoveAsync (not owned; null = MoveAsync is Move).
  void set_copy_engine(CopyEngine* engine) { engine_ = engine; }
  const StoreStats& stats() const;
  void ResetPeaks();

 private:
  struct Entry {
    int64_t capacity_numel;
    at::ScalarType dtype;
    Tier tier = Tier::kNone;
    at::Tensor payload;
    mutable std::shared_ptr<CopyTicket> pending;  // copy into payload still in flight
    at::Tensor home;  // its slot in the host pool, kept while it is on the device (keeps_home_slots)
    bool nvme = false;  // MarkNvme: a payload only while mounted
  };
  void Ready(int id) const;                       // waits for a pending copy
  std::shared_ptr<CopyTicket> CopyCounted(at::Tensor dst, at::Tensor src, bool to_device);
  void Relocate(int id, Tier to, bool long_lived, bool async);  // Move and MoveAsync
  void Account(Tier tier, int64_t bytes);  // bytes may be negative
  void CheckBudget(int id, Tier tier) const;
  // Throws naming `what` unless `tier` has `bytes` of budget left and (`need_range`) a
  // free range of its allocator that large.
  void CheckRoom(Tier tier, int64_t bytes, const std::string& what, bool need_range) const;
  TierAllocator& allocator(Tier tier);

  std::unique_ptr<TierAllocator> host_, device_;
  int64_t host_budget_bytes_, device_budget_bytes_;
  std::vector<Entry> chunks_;
  mutable StoreStats stats_;  // mutable: payload() const counts the wait for a copy in flight
  DeviceMemoryProbe* probe_ = nullptr;
  CopyEngine* engine_ = nullptr;
  std::vector<std::weak_ptr<CopyTicket>> unwaited_;  // copies out of the device not yet waited (ReleaseFinishedCopies)
};

}  // namespace ps::chunkmem
