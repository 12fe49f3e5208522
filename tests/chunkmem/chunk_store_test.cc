// ChunkStore with the simulated device tier: zero-filled allocation, exact budgets,
// bitwise round trips between tiers, and the byte counters.
#include <ATen/ATen.h>

#include "chunkmem/chunk_store.h"
#include "tests/catch.h"

namespace ps::chunkmem {
namespace {

ChunkStore SimulatedStore(int64_t host_budget, int64_t device_budget) {
  return ChunkStore(MakeHostAllocator(false), MakeDeviceAllocator(at::kCPU), host_budget, device_budget);
}

TEST_CASE("allocation is zero-filled and counted", "[store]") {
  auto store = SimulatedStore(1 << 20, 1000);
  const int a = store.Add(100, at::kFloat);  // 400 bytes
  CHECK(store.tier(a) == Tier::kNone);
  store.Allocate(a, Tier::kDevice);
  CHECK(store.tier(a) == Tier::kDevice);
  CHECK(store.payload(a).sum().item<double>() == 0.0);
  CHECK(store.BytesUsed(Tier::kDevice) == 400);
  store.Free(a);
  CHECK(store.BytesUsed(Tier::kDevice) == 0);
  CHECK(store.stats().peak_device_bytes == 400);
}

TEST_CASE("the device budget is never exceeded", "[store]") {
  auto store = SimulatedStore(1 << 20, 1000);
  const int a = store.Add(100, at::kFloat), b = store.Add(100, at::kFloat), c = store.Add(100, at::kFloat);
  store.Allocate(a, Tier::kDevice);
  store.Allocate(b, Tier::kDevice);
  CHECK_FALSE(store.CanHold(Tier::kDevice, store.chunk_bytes(c)));
  CHECK_THROWS_WITH(store.Allocate(c, Tier::kDevice),
                    Catch::Contains("device budget of 1000 bytes cannot take chunk 2 (400 bytes): 800 bytes already held"));
  store.Allocate(c, Tier::kHost);
  CHECK_THROWS(store.Move(c, Tier::kDevice));
  CHECK(store.tier(c) == Tier::kHost);  // a refused move leaves the chunk where it was
  store.Move(a, Tier::kHost);
  store.Move(c, Tier::kDevice);
  CHECK(store.BytesUsed(Tier::kDevice) == 800);
  CHECK(store.stats().peak_device_bytes == 800);
}

TEST_CASE("moves preserve the bytes exactly and count traffic", "[store]") {
  auto store = SimulatedStore(1 << 20, 1 << 20);
  const int a = store.Add(1000, at::kBFloat16);
  store.Allocate(a, Tier::kHost);
  store.payload(a).copy_(at::randn({1000}));
  const at::Tensor original = store.payload(a).clone();
  const void* host_ptr = store.payload(a).data_ptr();
  store.Move(a, Tier::kDevice);
  CHECK(store.payload(a).data_ptr() != host_ptr);  // a real copy, not an alias
  store.Move(a, Tier::kHost);
  CHECK(at::equal(store.payload(a), original));
  CHECK(store.stats().h2d_bytes == 2000);
  CHECK(store.stats().d2h_bytes == 2000);
  CHECK(store.BytesUsed(Tier::kHost) == 2000);
  CHECK(store.BytesUsed(Tier::kDevice) == 0);
}

}  // namespace
}  // namespace ps::chunkmem
