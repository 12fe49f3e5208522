// ChunkStore with the simulated device tier: zero-filled allocation, exact budgets,
// bitwise round trips between tiers, the byte counters, and the release of finished
// copies' device sources.
#include <ATen/ATen.h>

#include <memory>

#include "chunkmem/chunk_store.h"
#include "chunkmem/copy_engine.h"
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

// A copy engine that copies at once and counts ReleaseIfDone calls per ticket.
struct CountingTicket final : CopyTicket {
  int* releases;
  explicit CountingTicket(int* r) : releases(r) {}
  void Wait() override {}
  void ReleaseIfDone() override { ++*releases; }
};
struct CountingEngine final : CopyEngine {
  int releases = 0;
  std::shared_ptr<CopyTicket> Start(at::Tensor dst, at::Tensor src) override {
    dst.copy_(src);
    return std::make_shared<CountingTicket>(&releases);
  }
};

TEST_CASE("finished copies out of the device are released without a wait, handed-over ones too", "[store]") {
  ChunkStore store = SimulatedStore(1 << 20, 1 << 20);
  CountingEngine engine;
  store.set_copy_engine(&engine);
  const int a = store.Add(256, at::kFloat), b = store.Add(256, at::kFloat), c = store.Add(256, at::kFloat);
  for (int id : {a, b}) store.Allocate(id, Tier::kDevice);
  store.Allocate(c, Tier::kHost);
  store.MoveAsync(a, Tier::kHost);    // out of the device: its source is device memory
  store.MoveAsync(c, Tier::kDevice);  // into the device: nothing of the device to free
  store.MoveAsync(b, Tier::kHost);
  std::shared_ptr<CopyTicket> handed = store.TakePendingCopy(b);  // e.g. the speculation worker's
  REQUIRE(handed);
  store.ReleaseFinishedCopies();
  CHECK(engine.releases == 2);  // a's pending copy and b's handed-over one, not c's
  store.payload(a);             // waited for: the store drops a's ticket
  handed.reset();               // the holder is done with b's
  store.ReleaseFinishedCopies();
  CHECK(engine.releases == 2);  // nothing left to release
}

}  // namespace
}  // namespace ps::chunkmem
