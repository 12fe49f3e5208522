#include "chunkmem/memory_probe.h"

#include <c10/core/Allocator.h>
#include <c10/util/Exception.h>
#include <c10/util/ThreadLocalDebugInfo.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <optional>

#include "chunkmem/chunk_store.h"

#ifdef PS_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>
#endif

namespace ps::chunkmem {
namespace {

// Receives c10's CPU allocation reports while installed as the thread's PROFILER_STATE.
class CpuReport final : public c10::MemoryReportingInfoBase {
 public:
  void reportMemoryUsage(void* /*ptr*/, int64_t alloc_size, size_t /*total_allocated*/, size_t /*total_reserved*/,
                         c10::Device device) override {
    if (!device.is_cpu()) return;
    std::lock_guard<std::mutex> lock(mu_);
    live_ += alloc_size;
    peak_ = std::max(peak_, live_);
  }
  bool memoryProfilingEnabled() const override { return paused_.load() == 0; }

  int64_t live() {
    std::lock_guard<std::mutex> lock(mu_);
    return live_;
  }
  int64_t TakePeak() {
    std::lock_guard<std::mutex> lock(mu_);
    const int64_t p = peak_;
    peak_ = live_;
    return p;
  }
  void Pause() { ++paused_; }
  void Resume() { --paused_; }

 private:
  std::mutex mu_;
  int64_t live_ = 0;
  int64_t peak_ = 0;
  std::atomic<int> paused_{0};
};

class CpuMemoryProbe final : public DeviceMemoryProbe {
 public:
  CpuMemoryProbe() : report_(std::make_shared<CpuReport>()), guard_(c10::DebugInfoKind::PROFILER_STATE, report_) {}
  int64_t NonModelBytes() override { return report_->live(); }
  int64_t TakePeakNonModelBytes() override { return report_->TakePeak(); }
  void Pause() override { report_->Pause(); }
  void Resume() override { report_->Resume(); }

 private:
  std::shared_ptr<CpuReport> report_;
  c10::DebugInfoGuard guard_;
};

#ifdef PS_WITH_CUDA
class CudaMemoryProbe final : public DeviceMemoryProbe {
 public:
  CudaMemoryProbe(at::Device device, const ChunkStore& store)
      : device_(device.has_index() ? device.index() : c10::cuda::current_device()), store_(store) {}
  // Reserved, not allocated, bytes: what the caching allocator holds, cached free blocks
  // and fragmentation included, is what the device cannot give the chunks (PatrickStar
  // counted allocated bytes and could overcommit).
  int64_t NonModelBytes() override { return Reserved().current - ChunkBytes(); }
  int64_t TakePeakNonModelBytes() override {
    // The allocator's peak includes chunk bytes; subtract those on the device now (the
    // chunks of the moment just traced are still resident when this is called).
    const int64_t peak = Reserved().peak - ChunkBytes();
    c10::cuda::CUDACachingAllocator::resetPeakStats(device_);
    return std::max<int64_t>(0, peak);
  }
  void Pause() override {}
  void Resume() override {}

 private:
  c10::CachingAllocator::Stat Reserved() const {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device_);
    return stats.reserved_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)];
  }
  int64_t ChunkBytes() const { return store_.BytesUsed(Tier::kDevice); }

  c10::DeviceIndex device_;
  const ChunkStore& store_;
};
#endif

}  // namespace

std::unique_ptr<DeviceMemoryProbe> MakeCpuMemoryProbe() { return std::make_unique<CpuMemoryProbe>(); }

std::unique_ptr<DeviceMemoryProbe> MakeCudaMemoryProbe(at::Device device, const ChunkStore& store) {
#ifdef PS_WITH_CUDA
  TORCH_CHECK(device.is_cuda(), "chunkmem: CUDA memory probe needs a CUDA device, got ", device);
  return std::make_unique<CudaMemoryProbe>(device, store);
#else
  (void)store;
  TORCH_CHECK(false, "chunkmem: this build has no CUDA (build with --config=cuda) for device ", device);
#endif
}

int64_t CudaDeviceTotalBytes(at::Device device) {
#ifdef PS_WITH_CUDA
  c10::cuda::CUDAGuard guard(device.has_index() ? device.index() : c10::cuda::current_device());
  size_t free_bytes = 0, total_bytes = 0;
  const cudaError_t err = cudaMemGetInfo(&free_bytes, &total_bytes);
  TORCH_CHECK(err == cudaSuccess, "chunkmem: cudaMemGetInfo failed: ", cudaGetErrorString(err));
  return static_cast<int64_t>(total_bytes);
#else
  TORCH_CHECK(false, "chunkmem: this build has no CUDA (build with --config=cuda) for device ", device);
#endif
}

double CapCudaMemory(at::Device device, int64_t bytes) {
#ifdef PS_WITH_CUDA
  const c10::DeviceIndex index = device.has_index() ? device.index() : c10::cuda::current_device();
  const int64_t total = CudaDeviceTotalBytes(at::Device(at::kCUDA, index));
  TORCH_CHECK(bytes > 0 && bytes <= total, "chunkmem: cannot cap CUDA device ", static_cast<int>(index), " at ", bytes,
              " bytes: it has ", total);
  const double fraction = static_cast<double>(bytes) / static_cast<double>(total);
  c10::cuda::CUDACachingAllocator::setMemoryFraction(fraction, index);
  return fraction;
#else
  TORCH_CHECK(false, "chunkmem: this build has no CUDA (build with --config=cuda) to cap device ", device, " at ",
              bytes, " bytes");
#endif
}

}  // namespace ps::chunkmem
