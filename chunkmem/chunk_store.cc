#include "chunkmem/chunk_store.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <string>

#include "chunkmem/copy_engine.h"
#include "chunkmem/device_arena.h"
#include "chunkmem/memory_probe.h"

namespace ps::chunkmem {

const char* ToString(Tier t) {
  switch (t) {
    case Tier::kNone: return "none";
    case Tier::kHost: return "host";
    case Tier::kDevice: return "device";
  }
  return "?";
}

namespace {

class HostAllocator final : public TierAllocator {
 public:
  explicit HostAllocator(bool pinned) : pinned_(pinned) {}
  at::Tensor Allocate(int64_t numel, at::ScalarType dtype) override {
    return at::empty({numel}, at::TensorOptions().dtype(dtype).pinned_memory(pinned_));
  }
  at::Device device() const override { return at::kCPU; }

 private:
  bool pinned_;
};

class DeviceAllocator final : public TierAllocator {
 public:
  explicit DeviceAllocator(at::Device device) : device_(device) {}
  at::Tensor Allocate(int64_t numel, at::ScalarType dtype) override {
    return at::empty({numel}, at::TensorOptions().dtype(dtype).device(device_));
  }
  at::Device device() const override { return device_; }

 private:
  at::Device device_;
};

static_assert(HostPoolSlackBytes(1) == DeviceArena::kAlignBytes * HostPoolMaxPayloads(1),
              "HostPoolSlackBytes: one arena alignment per payload");

// The device arena (chunk.device_arena) and the host pool: one DeviceArena each.
class ArenaAllocator final : public TierAllocator {
 public:
  // The store counts exact payload bytes; the arena rounds each payload up to 64 bytes,
  // so it reserves `slack_bytes` for that rounding on top of `bytes`.
  ArenaAllocator(at::Device device, int64_t bytes, int64_t slack_bytes, DeviceArena::Memory memory,
                 bool keeps_home_slots)
      : arena_(device, bytes + slack_bytes, memory),
        device_(device),
        keeps_home_slots_(keeps_home_slots) {}
  at::Tensor Allocate(int64_t numel, at::ScalarType dtype) override { return Take(numel, dtype, false); }
  at::Tensor AllocateLongLived(int64_t numel, at::ScalarType dtype) override { return Take(numel, dtype, true); }
  at::Device device() const override { return device_; }
  bool CanFit(int64_t bytes) const override { return arena_.CanFit(bytes); }
  int64_t reserved_bytes() const override { return arena_.capacity_bytes(); }
  int64_t peak_used_bytes() const override { return arena_.peak_used_bytes(); }
  int64_t largest_free_bytes() const override { return arena_.largest_free_bytes(); }
  bool keeps_home_slots() const override { return keeps_home_slots_; }

 private:
  at::Tensor Take(int64_t numel, at::ScalarType dtype, bool long_lived) {
    at::Tensor t = arena_.TryAllocate(numel, dtype, long_lived);
    TORCH_CHECK(t.defined(), "chunkmem: ", keeps_home_slots_ ? "host pool" : "device arena", " of ",
                arena_.capacity_bytes(), " bytes has no free range of ", numel * c10::elementSize(dtype), " bytes (",
                arena_.free_bytes(), " free, largest range ", arena_.largest_free_bytes(), ")");
    return t;
  }

  DeviceArena arena_;
  at::Device device_;
  bool keeps_home_slots_;
};

}  // namespace

std::unique_ptr<TierAllocator> MakeArenaAllocator(at::Device device, int64_t bytes) {
  // The rounding of payloads of 4 KiB or more.
  return std::make_unique<ArenaAllocator>(device, bytes, DeviceArena::kAlignBytes * (bytes / 4096 + 1),
                                          DeviceArena::Memory::kOfDevice, /*keeps_home_slots=*/false);
}

std::unique_ptr<TierAllocator> MakeHostPoolAllocator(bool pinned, int64_t bytes, int64_t max_payloads,
                                                     HostPoolPinning pinning) {
  TORCH_CHECK(bytes > 0, "chunkmem: the host pool needs a size > 0, got ", bytes);
  TORCH_CHECK(max_payloads > 0, "chunkmem: the host pool needs a payload count > 0, got ", max_payloads);
  const DeviceArena::Memory memory = !pinned                                  ? DeviceArena::Memory::kOfDevice
                                     : pinning == HostPoolPinning::kRegister ? DeviceArena::Memory::kRegisteredHost
                                                                               : DeviceArena::Memory::kPinnedHost;
  try {
    return std::make_unique<ArenaAllocator>(at::kCPU, bytes, DeviceArena::kAlignBytes * max_payloads, memory,
                                            /*keeps_home_slots=*/true);
  } catch (const c10::Error& e) {
    TORCH_CHECK(false, "chunkmem: the host chunk pool of ", bytes, " bytes (", pinned ? "pinned" : "plain",
                " host memory) cannot be reserved: ", e.what_without_backtrace(),
                " The pool holds the chunks the host tier keeps, as the memory plan counts them (the host figure of "
                "`ps_train --plan`, which chunk.host_budget_bytes admitted); train a smaller model or free host "
                "memory.");
  }
}

std::unique_ptr<TierAllocator> MakeHostAllocator(bool pinned) { return std::make_unique<HostAllocator>(pinned); }
std::unique_ptr<TierAllocator> MakeDeviceAllocator(at::Device device) {
  return std::make_unique<DeviceAllocator>(device);
}

ChunkStore::ChunkStore(std::unique_ptr<TierAllocator> host, std::unique_ptr<TierAllocator> device,
                       int64_t host_budget_bytes, int64_t device_budget_bytes)
    : host_(std::move(host)),
      device_(std::move(device)),
      host_budget_bytes_(host_budget_bytes),
      device_budget_bytes_(device_budget_bytes) {
  TORCH_CHECK(host_budget_bytes >= 0 && device_budget_bytes >= 0, "chunkmem: budgets must be >= 0");
}

ChunkStore::~ChunkStore() {
  for (int id = 0; id < num_chunks(); ++id) {
    try {
      Ready(id);
    } catch (...) {  // a failed copy at teardown: nothing left to protect
    }
  }
}

int ChunkStore::Add(int64_t capacity_numel, at::ScalarType dtype) {
  TORCH_CHECK(capacity_numel > 0, "chunkmem: chunk capacity must be > 0");
  chunks_.push_back(Entry{capacity_numel, dtype, Tier::kNone, at::Tensor(), nullptr});
  return num_chunks() - 1;
}

int64_t ChunkStore::chunk_bytes(int id) const {
  const Entry& e = chunks_.at(id);
  return e.capacity_numel * static_cast<int64_t>(c10::elementSize(e.dtype));
}

int64_t ChunkStore::BytesUsed(Tier tier) const {
  switch (tier) {
    case Tier::kHost: return stats_.host_bytes;
    case Tier::kDevice: return stats_.device_bytes;
    case Tier::kNone: return 0;
  }
  return 0;
}

int64_t ChunkStore::Budget(Tier tier) const {
  switch (tier) {
    case Tier::kHost: return host_budget_bytes_;
    case Tier::kDevice: return device_budget_bytes_;
    case Tier::kNone: return 0;
  }
  return 0;
}

bool ChunkStore::CanHold(Tier tier, int64_t bytes) const {
  if (BytesUsed(tier) + bytes > Budget(tier)) return false;
  return tier == Tier::kNone || (tier == Tier::kHost ? host_ : device_)->CanFit(bytes);
}

at::Device ChunkStore::device_of(Tier tier) const {
  TORCH_INTERNAL_ASSERT(tier != Tier::kNone);
  return tier == Tier::kHost ? host_->device() : device_->device();
}

TierAllocator& ChunkStore::allocator(Tier tier) {
  TORCH_INTERNAL_ASSERT(tier != Tier::kNone);
  return tier == Tier::kHost ? *host_ : *device_;
}

void ChunkStore::CheckBudget(int id, Tier tier) const {
  // A chunk coming back to its host slot needs budget, not a free range.
  const bool slot_waiting = tier == Tier::kHost && chunks_.at(id).home.defined();
  CheckRoom(tier, chunk_bytes(id), "chunk " + std::to_string(id), /*need_range=*/!slot_waiting);
}

void ChunkStore::CheckRoom(Tier tier, int64_t bytes, const std::string& what, bool need_range) const {
  TORCH_CHECK(BytesUsed(tier) + bytes <= Budget(tier), "chunkmem: ", ToString(tier), " budget of ", Budget(tier),
              " bytes cannot take ", what, " (", bytes, " bytes): ", BytesUsed(tier), " bytes already held");
  if (!need_range) return;
  const TierAllocator& a = tier == Tier::kHost ? *host_ : *device_;
  TORCH_CHECK(a.CanFit(bytes), "chunkmem: the ", ToString(tier), " tier's reservation of ", a.reserved_bytes(),
              " bytes has no free range for ", what, " (", bytes, " bytes; largest free range ",
              a.largest_free_bytes(), " bytes; ", BytesUsed(tier), " bytes held)");
}

void ChunkStore::Account(Tier tier, int64_t bytes) {
  if (tier == Tier::kHost) {
    stats_.host_bytes += bytes;
    stats_.peak_host_bytes = std::max(stats_.peak_host_bytes, stats_.host_bytes);
  } else if (tier == Tier::kDevice) {
    stats_.device_bytes += bytes;
    stats_.peak_device_bytes = std::max(stats_.peak_device_bytes, stats_.device_bytes);
  }
}

void ChunkStore::Allocate(int id, Tier tier, bool zero) {
  Entry& e = chunks_.at(id);
  TORCH_INTERNAL_ASSERT(e.tier == Tier::kNone && !e.nvme, "chunk ", id, " already has a payload (or is on the NVMe tier)");
  CheckBudget(id, tier);
  ProbePause pause(probe_);
  e.payload = allocator(tier).Allocate(e.capacity_numel, e.dtype);
  if (tier == Tier::kHost && host_->keeps_home_slots()) e.home = e.payload;
  if (zero) e.payload.zero_();
  e.tier = tier;
  Account(tier, chunk_bytes(id));
}

void ChunkStore::Move(int id, Tier to, bool long_lived) { Relocate(id, to, long_lived, /*async=*/false); }

void ChunkStore::MoveAsync(int id, Tier to) { Relocate(id, to, /*long_lived=*/false, /*async=*/engine_ != nullptr); }

void ChunkStore::Relocate(int id, Tier to, bool long_lived, bool async) {
  Entry& e = chunks_.at(id);
  TORCH_INTERNAL_ASSERT(e.tier != Tier::kNone && to != Tier::kNone, "chunk ", id, " has no payload to move");
  if (e.tier == to) return;
  Ready(id);
  CheckBudget(id, to);
  ProbePause pause(probe_);
  at::Tensor dst;
  if (to == Tier::kHost && e.home.defined()) {
    dst = e.home;  // back into its slot (free since the chunk left: see Entry::home)
  } else {
    dst = long_lived ? allocator(to).AllocateLongLived(e.capacity_numel, e.dtype)
                     : allocator(to).Allocate(e.capacity_numel, e.dtype);
    if (to == Tier::kHost && host_->keeps_home_slots()) e.home = dst;
  }
  if (async) {
    e.pending = engine_->Start(dst, e.payload);  // the engine keeps the old payload alive until done
    if (e.tier == Tier::kDevice) {  // its device memory: ReleaseFinishedCopies frees it when the copy is done
      unwaited_.push_back(e.pending);
      if (unwaited_.size() > 64) ReleaseFinishedCopies();  // keeps the list short between calls
    }
  } else {
    dst.copy_(e.payload);
    ++stats_.syncs;
  }
  const int64_t bytes = chunk_bytes(id);
  (to == Tier::kDevice ? stats_.h2d_bytes : stats_.d2h_bytes) += bytes;
  ++(to == Tier::kDevice ? stats_.h2d_copies : stats_.d2h_copies);
  Account(to, bytes);
  Account(e.tier, -bytes);
  e.payload = dst;
  e.tier = to;
}

void ChunkStore::Ready(int id) const {
  const Entry& e = chunks_.at(id);
  if (!e.pending) return;
  const std::shared_ptr<CopyTicket> ticket = std::move(e.pending);
  e.pending.reset();
  ++stats_.syncs;
  ticket->Wait();
}

void ChunkStore::ReleaseFinishedCopies() {
  std::vector<std::weak_ptr<CopyTicket>> still;
  for (auto& weak : unwaited_) {
    if (std::shared_ptr<CopyTicket> ticket = weak.lock()) {
      ticket->ReleaseIfDone();
      still.push_back(std::move(weak));  // dropped once its last holder waited and let it go
    }
  }
  unwaited_ = std::move(still);
}

std::shared_ptr<CopyTicket> ChunkStore::TakePendingCopy(int id) {
  Entry& e = chunks_.at(id);
  if (!e.pending) return nullptr;
  ++stats_.syncs;
  return std::move(e.pending);
}

const at::Tensor& ChunkStore::payload(int id) const {
  Ready(id);
  const Entry& e = chunks_.at(id);
  TORCH_CHECK(!e.nvme || e.payload.defined(), "chunk ", id,
              " is on the NVMe tier and not in the ring now: it is read only while mounted (NvmeState)");
  return e.payload;
}

void ChunkStore::MarkNvme(int id) {
  Entry& e = chunks_.at(id);
  TORCH_INTERNAL_ASSERT(e.tier == Tier::kNone, "chunk ", id, " has a payload: it cannot go to the NVMe tier");
  e.nvme = true;
}

void ChunkStore::Mount(int id, at::Tensor view) {
  Entry& e = chunks_.at(id);
  TORCH_INTERNAL_ASSERT(e.nvme && !e.payload.defined(), "chunk ", id, " is not an unmounted NVMe-tier chunk");
  TORCH_INTERNAL_ASSERT(view.numel() == e.capacity_numel && view.scalar_type() == e.dtype && view.is_cpu(),
                        "chunk ", id, ": a mount must be a host view of its numel and dtype");
  e.payload = std::move(view);
}

void ChunkStore::Unmount(int id) {
  Entry& e = chunks_.at(id);
  TORCH_INTERNAL_ASSERT(e.nvme, "chunk ", id, " is not on the NVMe tier");
  e.payload = at::Tensor();
}

void ChunkStore::Free(int id) {
  Ready(id);
  Entry& e = chunks_.at(id);
  if (e.tier == Tier::kNone) return;
  ProbePause pause(probe_);
  Account(e.tier, -chunk_bytes(id));
  e.payload = at::Tensor();
  e.home = at::Tensor();
  e.tier = Tier::kNone;
}

at::Tensor ChunkStore::Borrow(Tier tier, int64_t numel, at::ScalarType dtype, bool zero) {
  const int64_t bytes = numel * static_cast<int64_t>(c10::elementSize(dtype));
  CheckRoom(tier, bytes, "a scratch payload", /*need_range=*/true);
  ProbePause pause(probe_);
  at::Tensor t = allocator(tier).Allocate(numel, dtype);
  if (zero) t.zero_();
  Account(tier, bytes);
  return t;
}

void ChunkStore::GiveBack(Tier tier, at::Tensor& scratch) {
  if (!scratch.defined()) return;
  ProbePause pause(probe_);
  Account(tier, -scratch.numel() * static_cast<int64_t>(scratch.element_size()));
  scratch = at::Tensor();
}

std::shared_ptr<CopyTicket> ChunkStore::CopyToHost(at::Tensor dst, at::Tensor src) {
  return CopyCounted(std::move(dst), std::move(src), /*to_device=*/false);
}

std::shared_ptr<CopyTicket> ChunkStore::CopyToDevice(at::Tensor dst, at::Tensor src) {
  return CopyCounted(std::move(dst), std::move(src), /*to_device=*/true);
}

std::shared_ptr<CopyTicket> ChunkStore::CopyCounted(at::Tensor dst, at::Tensor src, bool to_device) {
  TORCH_INTERNAL_ASSERT(dst.numel() == src.numel() && dst.scalar_type() == src.scalar_type());
  (to_device ? stats_.h2d_bytes : stats_.d2h_bytes) += src.numel() * static_cast<int64_t>(src.element_size());
  ++(to_device ? stats_.h2d_copies : stats_.d2h_copies);
  if (engine_) return engine_->Start(std::move(dst), std::move(src));
  dst.copy_(src);
  ++stats_.syncs;
  return nullptr;
}

void ChunkStore::Wait(CopyTicket& ticket) {
  ++stats_.syncs;
  ticket.Wait();
}

at::Tensor ChunkStore::ToHostSync(const at::Tensor& t) {
  stats_.d2h_bytes += t.numel() * static_cast<int64_t>(t.element_size());
  ++stats_.d2h_copies;
  ++stats_.syncs;
  return t.to(host_->device());
}

const StoreStats& ChunkStore::stats() const {
  stats_.host_pool_bytes = host_->reserved_bytes();
  stats_.peak_host_pool_used_bytes = host_->peak_used_bytes();
  return stats_;
}

void ChunkStore::ResetPeaks() {
  stats_.peak_host_bytes = stats_.host_bytes;
  stats_.peak_device_bytes = stats_.device_bytes;
}

}  // namespace ps::chunkmem
