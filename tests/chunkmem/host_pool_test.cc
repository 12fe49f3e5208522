// The host pool (MakeHostPoolAllocator): reserved once, no allocation on any move, every
// chunk back into its own slot, scratch buffers in what the slots leave (fragmenting and
// coalescing there), exhaustion and an impossible reservation as clear errors, and its
// size and peak use in StoreStats. Plain host memory (the simulated tier); the pinned
// variant differs only in how the one reservation is made.
#include <ATen/ATen.h>

#include <set>

#include "chunkmem/chunk_store.h"
#include "chunkmem/memory_probe.h"
#include "tests/catch.h"

namespace ps::chunkmem {
namespace {

constexpr int64_t kNumel = 1 << 12;       // fp32: 16 KiB per chunk
constexpr int64_t kBytes = kNumel * 4;
constexpr int64_t kMaxPayloads = 16;
// What the pool adds to a reservation for the arena's 64-byte rounding: 64 bytes for each
// payload it may hold, whatever the bytes.
int64_t WithRounding(int64_t bytes) { return bytes + 64 * kMaxPayloads; }

// Bytes LibTorch's CPU allocator hands out while `moves` runs (the probe sees every
// CPU allocation made on this thread).
template <typename F>
int64_t AllocatedDuring(F moves) {
  auto probe = MakeCpuMemoryProbe();
  probe->TakePeakNonModelBytes();
  const int64_t base = probe->NonModelBytes();
  moves();
  return probe->TakePeakNonModelBytes() - base;
}

// Four chunks on the host, moved to a device arena and back, eight times.
void RoundTrips(ChunkStore& store, const std::vector<int>& ids) {
  for (int round = 0; round < 8; ++round) {
    for (int id : ids) store.Move(id, Tier::kDevice);
    for (int id : ids) store.Move(id, Tier::kHost);
  }
}

TEST_CASE("host pool: reserved once; moves allocate nothing and come back to the same slot", "[pool]") {
  ChunkStore store(MakeHostPoolAllocator(/*pinned=*/false, 4 * kBytes, /*max_payloads=*/kMaxPayloads), MakeArenaAllocator(at::kCPU, 4 * kBytes),
                   8 * kBytes, 4 * kBytes);
  std::vector<int> ids;
  std::vector<const void*> slots;
  std::vector<at::Tensor> values;
  for (int i = 0; i < 4; ++i) {
    ids.push_back(store.Add(kNumel, at::kFloat));
    store.Allocate(ids.back(), Tier::kHost);
    store.payload(ids.back()).copy_(at::randn({kNumel}));
    values.push_back(store.payload(ids.back()).clone());
    slots.push_back(store.payload(ids.back()).data_ptr());
  }
  CHECK(AllocatedDuring([&] { RoundTrips(store, ids); }) == 0);
  for (int i = 0; i < 4; ++i) {
    CHECK(store.tier(ids[i]) == Tier::kHost);
    CHECK(store.payload(ids[i]).data_ptr() == slots[i]);  // its own slot, every time
    CHECK(at::equal(store.payload(ids[i]), values[i]));
  }
  CHECK(store.stats().host_pool_bytes == WithRounding(4 * kBytes));
  CHECK(store.stats().peak_host_pool_used_bytes == 4 * kBytes);
  CHECK(store.stats().h2d_copies == 32);
}

TEST_CASE("without the pool every move to the host allocates (what the pool removes)", "[pool]") {
  ChunkStore store(MakeHostAllocator(/*pinned=*/false), MakeArenaAllocator(at::kCPU, 4 * kBytes), 8 * kBytes,
                   4 * kBytes);
  std::vector<int> ids;
  for (int i = 0; i < 4; ++i) {
    ids.push_back(store.Add(kNumel, at::kFloat));
    store.Allocate(ids.back(), Tier::kHost);
  }
  CHECK(AllocatedDuring([&] { RoundTrips(store, ids); }) >= kBytes);
  CHECK(store.stats().host_pool_bytes == 0);
  CHECK(store.stats().peak_host_pool_used_bytes == 0);
}

TEST_CASE("host pool: a chunk's slot stays its own while it is on the device; scratch uses the rest", "[pool]") {
  // Two chunk slots and room for two scratch buffers of one chunk each.
  ChunkStore store(MakeHostPoolAllocator(false, 4 * kBytes, kMaxPayloads), MakeDeviceAllocator(at::kCPU), 4 * kBytes, 4 * kBytes);
  const int a = store.Add(kNumel, at::kFloat), b = store.Add(kNumel, at::kFloat);
  store.Allocate(a, Tier::kHost);
  store.Allocate(b, Tier::kHost);
  store.Move(a, Tier::kDevice);
  store.Move(b, Tier::kDevice);
  // The budget counts 0 host bytes now, but a's and b's slots are kept: two scratch
  // buffers fit, a third does not (the pool, not the budget, refuses).
  at::Tensor s1 = store.Borrow(Tier::kHost, kNumel, at::kFloat, /*zero=*/true);
  at::Tensor s2 = store.Borrow(Tier::kHost, kNumel, at::kFloat, /*zero=*/true);
  CHECK(store.BytesUsed(Tier::kHost) == 2 * kBytes);
  CHECK(store.Budget(Tier::kHost) - store.BytesUsed(Tier::kHost) >= kBytes);
  CHECK_FALSE(store.CanHold(Tier::kHost, kBytes));
  // Both chunks still come home while the scratch buffers are out.
  store.Move(a, Tier::kHost);
  store.Move(b, Tier::kHost);
  CHECK(store.BytesUsed(Tier::kHost) == 4 * kBytes);
  CHECK(store.stats().peak_host_pool_used_bytes == 4 * kBytes);
  store.GiveBack(Tier::kHost, s1);
  store.GiveBack(Tier::kHost, s2);
}

TEST_CASE("host pool: scratch ranges fragment and coalesce; a chunk never lands in a hole too small", "[pool]") {
  // One chunk slot (4 units), then 4 units for scratch.
  constexpr int64_t kUnit = kBytes / 4;
  ChunkStore store(MakeHostPoolAllocator(false, 8 * kUnit, kMaxPayloads), MakeDeviceAllocator(at::kCPU), 64 * kBytes, 64 * kBytes);
  const int a = store.Add(kNumel, at::kFloat);
  store.Allocate(a, Tier::kHost);
  at::Tensor s1 = store.Borrow(Tier::kHost, kUnit / 4, at::kFloat, false);  // 1 unit each
  at::Tensor s2 = store.Borrow(Tier::kHost, kUnit / 4, at::kFloat, false);
  at::Tensor s3 = store.Borrow(Tier::kHost, kUnit / 4, at::kFloat, false);
  store.GiveBack(Tier::kHost, s2);  // free: unit 2, and unit 4 (plus the rounding slack)
  CHECK_FALSE(store.CanHold(Tier::kHost, 2 * kUnit));
  CHECK_THROWS_WITH(store.Borrow(Tier::kHost, kUnit / 2, at::kFloat, false),
                    Catch::Contains("the host tier's reservation of " + std::to_string(WithRounding(8 * kUnit)) +
                                    " bytes has no free range for a scratch payload (" + std::to_string(2 * kUnit) +
                                    " bytes"));
  store.GiveBack(Tier::kHost, s3);  // units 2..4 coalesce
  CHECK(store.CanHold(Tier::kHost, 2 * kUnit));
  at::Tensor big = store.Borrow(Tier::kHost, kUnit / 2, at::kFloat, false);
  // A second chunk first allocated on the device has no slot: coming to the host it
  // needs a free range of its size, and there is none (a clear error, nothing moved).
  const int b = store.Add(kNumel, at::kFloat);
  store.Allocate(b, Tier::kDevice);
  CHECK_THROWS_WITH(store.Move(b, Tier::kHost),
                    Catch::Contains("the host tier's reservation of " + std::to_string(WithRounding(8 * kUnit)) +
                                    " bytes has no free range for chunk 1 (" + std::to_string(kBytes) + " bytes"));
  CHECK(store.tier(b) == Tier::kDevice);
  store.GiveBack(Tier::kHost, s1);
  store.GiveBack(Tier::kHost, big);
  store.Move(b, Tier::kHost);  // now it fits, and keeps that range as its slot
  const void* slot = store.payload(b).data_ptr();
  store.Move(b, Tier::kDevice);
  store.Move(b, Tier::kHost);
  CHECK(store.payload(b).data_ptr() == slot);
}

// The slack is per payload: a pool of exactly its payloads' bytes holds max_payloads
// payloads of any odd size (each rounded up to 64 bytes), and reserves no more.
TEST_CASE("host pool: its rounding slack is 64 bytes per payload it may hold", "[pool]") {
  constexpr int64_t kOdd = 25;  // fp32: 100 bytes, rounded to 128 in the arena
  ChunkStore store(MakeHostPoolAllocator(false, kMaxPayloads * kOdd * 4, kMaxPayloads), MakeDeviceAllocator(at::kCPU),
                   1 << 20, 1 << 20);
  CHECK(store.stats().host_pool_bytes == WithRounding(kMaxPayloads * kOdd * 4));
  for (int i = 0; i < kMaxPayloads; ++i) {
    const int id = store.Add(kOdd, at::kFloat);
    store.Allocate(id, Tier::kHost);
  }
  CHECK(store.BytesUsed(Tier::kHost) == kMaxPayloads * kOdd * 4);
}

TEST_CASE("host pool: the budget still refuses first, with its own message", "[pool]") {
  ChunkStore store(MakeHostPoolAllocator(false, 4 * kBytes, kMaxPayloads), MakeDeviceAllocator(at::kCPU), kBytes, 4 * kBytes);
  const int a = store.Add(kNumel, at::kFloat), b = store.Add(kNumel, at::kFloat);
  store.Allocate(a, Tier::kHost);
  CHECK_THROWS_WITH(store.Allocate(b, Tier::kHost),
                    Catch::Contains("host budget of " + std::to_string(kBytes) + " bytes cannot take chunk 1"));
}

TEST_CASE("host pool: a size that cannot be reserved fails at once, naming the bytes", "[pool]") {
  CHECK_THROWS_WITH(MakeHostPoolAllocator(false, 0, kMaxPayloads), Catch::Contains("needs a size > 0"));
#ifndef PS_WITH_CUDA
  CHECK_THROWS_WITH(MakeHostPoolAllocator(/*pinned=*/true, kBytes, kMaxPayloads),
                    Catch::Contains("pinned host memory needs a CUDA build"));
  CHECK_THROWS_WITH(MakeHostPoolAllocator(/*pinned=*/true, kBytes, kMaxPayloads, HostPoolPinning::kRegister),
                    Catch::Contains("registered host memory needs a CUDA build"));
#endif
#if !defined(__SANITIZE_ADDRESS__)  // ASan aborts on an allocation this size instead of failing it
  const int64_t huge = int64_t{1} << 60;  // beyond any address space: the allocation fails
  CHECK_THROWS_WITH(MakeHostPoolAllocator(false, huge, kMaxPayloads),
                    Catch::Contains("the host chunk pool of " + std::to_string(huge) + " bytes (plain host memory) cannot be reserved"));
#endif
}

}  // namespace
}  // namespace ps::chunkmem
