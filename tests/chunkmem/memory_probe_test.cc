// The CPU memory probe (non-model memory of the simulated device): it counts LibTorch
// CPU allocations and frees made while it exists, keeps a resettable peak, and ignores
// what is allocated while paused, including the chunk store's payloads.
#include <ATen/ATen.h>

#include "chunkmem/chunk_store.h"
#include "chunkmem/memory_probe.h"
#include "tests/catch.h"

namespace ps::chunkmem {
namespace {

constexpr int64_t kMiB = 1 << 20;

TEST_CASE("CPU probe counts live allocations and their peak", "[probe]") {
  const at::Tensor before = at::empty({kMiB / 4});  // allocated before the probe: never counted
  auto probe = MakeCpuMemoryProbe();
  const int64_t base = probe->NonModelBytes();
  probe->TakePeakNonModelBytes();
  {
    at::Tensor a = at::empty({kMiB / 4});  // 1 MiB of floats
    CHECK(probe->NonModelBytes() - base >= kMiB);
    at::Tensor b = at::empty({kMiB / 2});  // 2 MiB more
    CHECK(probe->NonModelBytes() - base >= 3 * kMiB);
  }
  CHECK(probe->NonModelBytes() - base < kMiB);           // both freed
  CHECK(probe->TakePeakNonModelBytes() - base >= 3 * kMiB);
  CHECK(probe->TakePeakNonModelBytes() - base < kMiB);    // the peak restarted
  {
    at::Tensor dropped = before;  // freeing an uncounted allocation changes nothing
  }
  CHECK(probe->NonModelBytes() - base < kMiB);
}

TEST_CASE("paused allocations and chunk payloads are not non-model memory", "[probe]") {
  auto probe = MakeCpuMemoryProbe();
  const int64_t base = probe->NonModelBytes();
  at::Tensor paused;
  {
    ProbePause pause(probe.get());
    paused = at::empty({kMiB / 4});
  }
  CHECK(probe->NonModelBytes() - base < kMiB);
  paused = at::Tensor();  // its free is not counted either
  CHECK(probe->NonModelBytes() - base > -kMiB);

  ChunkStore store(MakeHostAllocator(false), MakeDeviceAllocator(at::kCPU), 64 * kMiB, 64 * kMiB);
  store.set_memory_probe(probe.get());
  const int id = store.Add(kMiB, at::kFloat);  // 4 MiB
  store.Allocate(id, Tier::kHost);
  store.Move(id, Tier::kDevice);
  CHECK(probe->NonModelBytes() - base < kMiB);
  store.Free(id);
  CHECK(probe->NonModelBytes() - base > -kMiB);
  CHECK(probe->NonModelBytes() - base < kMiB);
}

// PS_WITH_CUDA comes from this test's own local_defines (tests/chunkmem/BUILD): the
// library's local_defines do not reach the files that include its header.
TEST_CASE("the CUDA probe refuses what it cannot measure", "[probe]") {
  ChunkStore store(MakeHostAllocator(false), MakeDeviceAllocator(at::kCPU), kMiB, kMiB);
#ifdef PS_WITH_CUDA
  CHECK_THROWS_WITH(MakeCudaMemoryProbe(at::Device(at::kCPU), store), Catch::Contains("needs a CUDA device"));
#else
  CHECK_THROWS_WITH(MakeCudaMemoryProbe(at::Device(at::kCUDA, 0), store), Catch::Contains("--config=cuda"));
  CHECK_THROWS_WITH(CudaDeviceTotalBytes(at::Device(at::kCUDA, 0)), Catch::Contains("--config=cuda"));
#endif
}

#ifdef PS_WITH_CUDA
TEST_CASE("CUDA probe: reserved bytes minus the device chunks' bytes", "[probe][cuda]") {
  if (!at::hasCUDA()) {
    // A CUDA build on a machine without a GPU: asking for device memory is an error,
    // never a made-up zero.
    CHECK_THROWS_AS(CudaDeviceTotalBytes(at::Device(at::kCUDA, 0)), c10::Error);
    return;
  }
  const at::Device cuda(at::kCUDA, 0);
  CHECK(CudaDeviceTotalBytes(cuda) > 64 * kMiB);
  ChunkStore store(MakeHostAllocator(true), MakeDeviceAllocator(cuda), 64 * kMiB, 64 * kMiB);
  auto probe = MakeCudaMemoryProbe(cuda, store);
  const int64_t base = probe->NonModelBytes();
  probe->TakePeakNonModelBytes();
  {
    // 64 MiB: more than this fresh process's caching allocator can have cached.
    at::Tensor activations = at::empty({16 * kMiB}, at::TensorOptions().device(cuda));
    CHECK(probe->NonModelBytes() - base >= 64 * kMiB);
  }
  // Reserved, not allocated: the freed block stays in the cache and still counts.
  CHECK(probe->NonModelBytes() - base >= 64 * kMiB);
  CHECK(probe->TakePeakNonModelBytes() - base >= 64 * kMiB);
  const int64_t before_chunk = probe->NonModelBytes();
  const int id = store.Add(4 * kMiB, at::kFloat);  // 16 MiB: the cached 64 MiB block may serve it
  store.Allocate(id, Tier::kDevice);
  CHECK(store.BytesUsed(Tier::kDevice) == 16 * kMiB);
  CHECK(probe->NonModelBytes() <= before_chunk);  // chunk bytes are subtracted, not added
}
#endif

}  // namespace
}  // namespace ps::chunkmem
