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

TEST_CASE("without a CUDA build the CUDA probe explains itself", "[probe]") {
#ifndef PS_WITH_CUDA
  ChunkStore store(MakeHostAllocator(false), MakeDeviceAllocator(at::kCPU), kMiB, kMiB);
  CHECK_THROWS_WITH(MakeCudaMemoryProbe(at::Device(at::kCUDA, 0), store), Catch::Contains("--config=cuda"));
#endif
}

}  // namespace
}  // namespace ps::chunkmem
