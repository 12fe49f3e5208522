// DeviceArena: memory of one tier reserved once and carved into chunk payloads. The
// device tier's arena (chunk.device_arena), and the host tier's pool (pinned host
// memory under CUDA, plain host memory on the simulated tier; docs/chunkmem.md).
//
// The whole size is allocated up front (one allocation, so a size that does not fit
// fails at start, not mid-training), and payloads are byte ranges of it: first fit over
// a free list of 64-byte-aligned ranges, coalesced on free. After construction the
// arena never calls an allocator, so the chunk bytes of the tier are exactly what was
// reserved, whatever LibTorch's caching allocators (device, or pinned host: it rounds
// every block to a power of two and caches freed ones) would do.
// Payload tensors own their range: it returns to the free list when the last tensor
// referencing it dies (on any thread), even after the arena object is gone.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>

namespace ps::chunkmem {

class DeviceArena {
 public:
  enum class Memory {
    kOfDevice,    // at::empty on `device`: a CUDA device, or the CPU (simulated tier, plain host)
    kPinnedHost,  // page-locked host memory, one cudaHostAlloc (`device` must be the CPU; CUDA builds)
    // Page-locked host memory mapped and made resident on many threads, then one
    // cudaHostRegister (chunkmem/host_mapping.h; `device` the CPU; CUDA builds).
    kRegisteredHost,
  };
  // Reserves `bytes` (rounded down to the alignment) of `memory`; throws c10::Error
  // naming the bytes when the reservation fails.
  DeviceArena(at::Device device, int64_t bytes, Memory memory = Memory::kOfDevice);
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
  // Most bytes in payloads at once since construction (64-byte rounding included).
  int64_t peak_used_bytes() const;
  // Whether `ptr` lies inside the reservation.
  bool Contains(const void* ptr) const;
  static constexpr int64_t kAlignBytes = 64;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace ps::chunkmem
