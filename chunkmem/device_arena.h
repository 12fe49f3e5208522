// DeviceArena: device memory reserved once and carved into chunk payloads.
//
// The whole device chunk budget is allocated up front (one allocation, so a budget that
// does not fit the device fails at start, not mid-training), and payloads are byte
// ranges of it: first fit over a free list of 64-byte-aligned ranges, coalesced on
// free. After construction the arena never calls an allocator, so the chunk bytes on
// the device are exactly what the budget says, whatever the caching allocator does.
// Payload tensors own their range: it returns to the free list when the last tensor
// referencing it dies (on any thread), even after the arena object is gone.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>

namespace ps::chunkmem {

class DeviceArena {
 public:
  // Reserves `bytes` on `device` (a CUDA device, or the CPU for the simulated tier).
  DeviceArena(at::Device device, int64_t bytes);
  ~DeviceArena();
  DeviceArena(const DeviceArena&) = delete;
  DeviceArena& operator=(const DeviceArena&) = delete;

  // A 1-D tensor of `numel` elements of `dtype` in the arena (uninitialised), or an
  // undefined tensor when no free range is large enough. Long-lived payloads (the
  // optimizer's chunks, which never leave) are taken from the top of the arena (last
  // fit) and moving ones from the bottom (first fit), so the two do not interleave.
  at::Tensor TryAllocate(int64_t numel, at::ScalarType dtype, bool long_lived = false);
  // Whether TryAllocate(bytes) would succeed now.
  bool CanFit(int64_t bytes) const;

  int64_t capacity_bytes() const;
  int64_t free_bytes() const;
  int64_t largest_free_bytes() const;
  static constexpr int64_t kAlignBytes = 64;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace ps::chunkmem
