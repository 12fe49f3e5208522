#include "chunkmem/device_arena.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <iterator>
#include <map>
#include <mutex>
#include <string>

#include "chunkmem/host_mapping.h"

#ifdef PS_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace ps::chunkmem {

namespace {
int64_t RoundUp(int64_t bytes) { return (bytes + DeviceArena::kAlignBytes - 1) / DeviceArena::kAlignBytes * DeviceArena::kAlignBytes; }

// `bytes` of page-locked host memory in one cudaHostAlloc, freed with cudaFreeHost when
// the last tensor referencing it dies. Not at::empty(pinned_memory(true)): LibTorch's
// pinned allocator would round the request up to a power of two (88 GB -> 128 GiB).
at::Tensor PinnedHostBytes(int64_t bytes) {
#ifdef PS_WITH_CUDA
  void* ptr = nullptr;
  const cudaError_t err = cudaHostAlloc(&ptr, static_cast<size_t>(bytes), cudaHostAllocDefault);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky error state of the failed call
    TORCH_CHECK(false, "cudaHostAlloc of ", bytes, " bytes failed: ", cudaGetErrorString(err));
  }
  return at::from_blob(ptr, {bytes}, [](void* p) { cudaFreeHost(p); }, at::TensorOptions().dtype(at::kByte));
#else
  TORCH_CHECK(false, "pinned host memory needs a CUDA build (--config=cuda); asked for ", bytes, " bytes");
#endif
}

// `bytes` mapped and made resident on many threads (MapResidentHostBytes), then
// page-locked by one cudaHostRegister; unregistered, then unmapped, when the last
// tensor referencing it dies.
at::Tensor RegisteredHostBytes(int64_t bytes) {
#ifdef PS_WITH_CUDA
  auto mapping = std::make_unique<at::Tensor>(MapResidentHostBytes(bytes));
  void* ptr = mapping->data_ptr();
  const cudaError_t err = cudaHostRegister(ptr, static_cast<size_t>(bytes), cudaHostRegisterDefault);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky error state of the failed call
    TORCH_CHECK(false, "cudaHostRegister of ", bytes, " bytes failed: ", cudaGetErrorString(err));
  }
  at::Tensor* held = mapping.release();  // the deleter owns the mapping from here on
  return at::from_blob(
      ptr, {bytes},
      [held](void* p) {
        // A deleter cannot throw: a failed unregister is cleared and the mapping released anyway.
        if (cudaHostUnregister(p) != cudaSuccess) (void)cudaGetLastError();
        delete held;  // the last reference to the mapping: munmap
      },
      at::TensorOptions().dtype(at::kByte));
#else
  TORCH_CHECK(false, "registered host memory needs a CUDA build (--config=cuda); asked for ", bytes, " bytes");
#endif
}
}  // namespace

struct DeviceArena::State {
  at::Tensor buffer;                   // the reservation (uint8)
  char* base = nullptr;
  int64_t capacity = 0;
  mutable std::mutex mu;
  std::map<int64_t, int64_t> free;     // offset -> length, non-adjacent ranges
  int64_t free_bytes = 0;
  int64_t peak_used = 0;               // capacity - free_bytes, at its highest

  void Release(int64_t offset, int64_t length) {
    std::lock_guard<std::mutex> lock(mu);
    free_bytes += length;
    auto next = free.lower_bound(offset);
    if (next != free.begin()) {
      auto prev = std::prev(next);
      TORCH_INTERNAL_ASSERT(prev->first + prev->second <= offset, "arena: double free at ", offset);
      if (prev->first + prev->second == offset) {  // merge with the range before
        offset = prev->first;
        length += prev->second;
        free.erase(prev);
      }
    }
    if (next != free.end()) {
      TORCH_INTERNAL_ASSERT(offset + length <= next->first, "arena: double free at ", offset);
      if (offset + length == next->first) {  // and with the one after
        length += next->second;
        free.erase(next);
      }
    }
    free[offset] = length;
  }
};

DeviceArena::DeviceArena(at::Device device, int64_t bytes, Memory memory) : state_(std::make_shared<State>()) {
  TORCH_CHECK(bytes > 0, "chunkmem: arena size must be > 0, got ", bytes);
  TORCH_CHECK(memory == Memory::kOfDevice || device.is_cpu(), "chunkmem: a pinned host arena lives on the CPU, not ",
              device);
  state_->capacity = bytes / kAlignBytes * kAlignBytes;
  try {
    switch (memory) {
      case Memory::kPinnedHost: state_->buffer = PinnedHostBytes(state_->capacity); break;
      case Memory::kRegisteredHost: state_->buffer = RegisteredHostBytes(state_->capacity); break;
      case Memory::kOfDevice:
        state_->buffer = at::empty({state_->capacity}, at::TensorOptions().dtype(at::kByte).device(device));
        break;
    }
  } catch (const c10::Error& e) {
    TORCH_CHECK(false, "chunkmem: cannot reserve ", state_->capacity, " bytes of ",
                memory == Memory::kOfDevice ? device.str() : std::string("pinned host memory"), ": ",
                e.what_without_backtrace());
  }
  state_->base = static_cast<char*>(state_->buffer.data_ptr());
  state_->free[0] = state_->capacity;
  state_->free_bytes = state_->capacity;
}

DeviceArena::~DeviceArena() = default;

at::Tensor DeviceArena::TryAllocate(int64_t numel, at::ScalarType dtype, bool long_lived) {
  const int64_t bytes = RoundUp(numel * static_cast<int64_t>(c10::elementSize(dtype)));
  int64_t offset = -1;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    auto& free = state_->free;
    if (long_lived) {  // last fit: the end of the highest range that is large enough
      for (auto it = free.rbegin(); it != free.rend(); ++it) {
        if (it->second < bytes) continue;
        const int64_t start = it->first, length = it->second;
        offset = start + length - bytes;
        free.erase(start);
        if (length > bytes) free[start] = length - bytes;
        break;
      }
    } else {  // first fit
      for (auto it = free.begin(); it != free.end(); ++it) {
        if (it->second < bytes) continue;
        offset = it->first;
        const int64_t rest = it->second - bytes;
        free.erase(it);
        if (rest > 0) free[offset + bytes] = rest;
        break;
      }
    }
    if (offset >= 0) {
      state_->free_bytes -= bytes;
      state_->peak_used = std::max(state_->peak_used, state_->capacity - state_->free_bytes);
    }
  }
  if (offset < 0) return at::Tensor();
  std::shared_ptr<State> state = state_;  // the range outlives the arena object if needed
  return at::from_blob(
      state_->base + offset, {numel}, [state, offset, bytes](void*) { state->Release(offset, bytes); },
      at::TensorOptions().dtype(dtype).device(state_->buffer.device()));
}

bool DeviceArena::CanFit(int64_t bytes) const {
  const int64_t need = RoundUp(bytes);
  std::lock_guard<std::mutex> lock(state_->mu);
  for (const auto& [offset, length] : state_->free) {
    if (length >= need) return true;  // first fit: the first range that is large enough
  }
  return false;
}

int64_t DeviceArena::capacity_bytes() const { return state_->capacity; }

int64_t DeviceArena::free_bytes() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->free_bytes;
}

int64_t DeviceArena::largest_free_bytes() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  int64_t best = 0;
  for (const auto& [offset, length] : state_->free) best = std::max(best, length);
  return best;
}

int64_t DeviceArena::peak_used_bytes() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->peak_used;
}

bool DeviceArena::Contains(const void* ptr) const {
  const auto* p = static_cast<const char*>(ptr);
  return p >= state_->base && p < state_->base + state_->capacity;
}

}  // namespace ps::chunkmem
