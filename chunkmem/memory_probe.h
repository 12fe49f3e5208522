// DeviceMemoryProbe: how much compute-device memory is in use outside the chunks (the
// "non-model" memory: activations, gradients in flight, temporaries). The runtime's
// warm-up tracer reads it at every moment to learn, per moment, how much of the device
// the chunks may use afterwards (docs/chunkmem.md, "Memory tracer").
//
// CPU probe (the simulated device tier): counts every LibTorch CPU allocation and free
// made while it exists, through c10's memory-reporting hook on the creating thread.
// The chunk store pauses it around its own payload allocations, so chunk bytes are
// never counted. CUDA probe: the caching allocator's reserved bytes (cache and
// fragmentation included) minus the chunk bytes on the device.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <memory>

namespace ps::chunkmem {

class ChunkStore;

class DeviceMemoryProbe {
 public:
  virtual ~DeviceMemoryProbe() = default;
  // Non-model bytes allocated on the compute device now.
  virtual int64_t NonModelBytes() = 0;
  // The highest NonModelBytes since the previous call (or since creation); restarts the
  // peak from the current value.
  virtual int64_t TakePeakNonModelBytes() = 0;
  // While paused, allocations are not seen (and their frees never will be).
  virtual void Pause() = 0;
  virtual void Resume() = 0;
};

// Pauses `probe` (may be null) for its scope.
class ProbePause {
 public:
  explicit ProbePause(DeviceMemoryProbe* probe) : probe_(probe) {
    if (probe_) probe_->Pause();
  }
  ~ProbePause() {
    if (probe_) probe_->Resume();
  }
  ProbePause(const ProbePause&) = delete;
  ProbePause& operator=(const ProbePause&) = delete;

 private:
  DeviceMemoryProbe* probe_;
};

// Counts CPU allocations made on the calling thread from now until it is destroyed
// (destroy it on the same thread, after any nested c10 debug-info guards).
std::unique_ptr<DeviceMemoryProbe> MakeCpuMemoryProbe();

// CUDA caching-allocator statistics of `device`, minus `store`'s device-tier bytes.
// Throws if this build has no CUDA.
std::unique_ptr<DeviceMemoryProbe> MakeCudaMemoryProbe(at::Device device, const ChunkStore& store);

// Total memory of CUDA device `device` in bytes (cudaMemGetInfo); throws without CUDA.
int64_t CudaDeviceTotalBytes(at::Device device);

// Caps LibTorch's CUDA caching allocator on `device` at `bytes` (its per-process
// memory fraction, bytes / total), so allocating beyond a stated device memory
// (chunk.device_memory_bytes below the card's) is an out-of-memory error, as on a card
// that small. Returns the fraction set. Throws without CUDA.
double CapCudaMemory(at::Device device, int64_t bytes);

}  // namespace ps::chunkmem
