// Residency against scripted access traces (no model, no autograd): eviction order
// (LRU in warm-up, Belady after), prefetch and what it may evict, traced per-moment
// budgets from a scripted probe, pins, the give-way hook, the error when the chunks in
// use do not fit, and a restored warm-up. Chunks are 1 KiB on the simulated device.
#include <ATen/ATen.h>

#include <map>
#include <memory>
#include <set>
#include <vector>

#include "chunkmem/chunk_store.h"
#include "chunkmem/memory_probe.h"
#include "chunkmem/residency.h"
#include "tests/catch.h"

namespace ps::chunkmem {
namespace {

constexpr int64_t kChunkNumel = 256;  // fp32: 1 KiB
constexpr int64_t kChunkBytes = kChunkNumel * 4;

// A store with `chunks` fp32 compute chunks on the host and a device budget of
// `device_chunks` chunks (plus `extra_bytes`).
struct Fixture {
  std::unique_ptr<ChunkStore> store;
  std::vector<int> ids;
  Fixture(int chunks, int64_t device_chunks, int64_t extra_bytes = 0)
      : store(std::make_unique<ChunkStore>(MakeHostAllocator(false), MakeDeviceAllocator(at::kCPU), 1 << 24,
                                           device_chunks * kChunkBytes + extra_bytes)) {
    for (int c = 0; c < chunks; ++c) {
      ids.push_back(store->Add(kChunkNumel, at::kFloat));
      store->Allocate(ids.back(), Tier::kHost);
    }
  }
  std::unique_ptr<Residency> Make(const ResidencySettings& settings, const PlannedDeviceBytes& placed = {}) {
    return std::make_unique<Residency>(*store, ids, std::vector<bool>{}, settings, placed);
  }
  std::set<int> OnDevice(const Residency& r) const {
    std::set<int> out;
    for (int c = 0; c < static_cast<int>(ids.size()); ++c) {
      if (r.on_device(c)) out.insert(c);
    }
    return out;
  }
};

using Script = std::vector<std::vector<int>>;  // [moment] -> chunks used

ResidencySettings Settings(EvictionPolicyKind eviction, int64_t prefetch_depth) {
  ResidencySettings s;
  s.eviction = eviction;
  s.prefetch_depth = prefetch_depth;
  s.warmup_steps = 1;
  return s;
}

// One iteration of `script`; after each moment's accesses and prefetch, `check(t)`.
template <typename Check>
void RunIteration(Residency& r, const Script& script, Check check) {
  for (int t = 0; t < static_cast<int>(script.size()); ++t) {
    r.BeginMoment("moment", t);
    for (int c : script[t]) r.Acquire(c);
    r.Prefetch();
    check(t);
    for (int c : script[t]) r.Release(c);
  }
  r.EndIteration();
}
void RunIteration(Residency& r, const Script& script) {
  RunIteration(r, script, [](int) {});
}

// (The device budget itself the store enforces; the traced cases below test the
// residency's own, lower budgets.)
TEST_CASE("chunks in use are on the device, in every policy and prefetch depth", "[residency]") {
  const Script script = {{0}, {1, 2}, {3}, {0, 4}, {5}, {4, 3}, {2}, {1, 0}};
  for (EvictionPolicyKind eviction : {EvictionPolicyKind::kLru, EvictionPolicyKind::kOpt}) {
    for (int64_t depth : {0, 1, 2}) {
      Fixture f(6, 3);
      auto r = f.Make(Settings(eviction, depth));
      for (int it = 0; it < 3; ++it) {
        RunIteration(*r, script, [&](int t) {
          for (int c : script[t]) REQUIRE(r->on_device(c));
        });
      }
      CHECK(r->warmed_up());
      CHECK(r->stats().moments_per_iteration == 8);
    }
  }
}

TEST_CASE("warm-up evicts least recently used; afterwards the chunk needed furthest ahead", "[residency]") {
  // Two chunks fit. The first iteration (LRU) ends with {2, 0} on the device. At moment
  // 1 of the second, chunk 1 needs room: chunk 0 is next used at moment 3, chunk 2 at
  // moment 2, so Belady evicts 0 while LRU evicts 2 (touched before 0).
  const Script script = {{0}, {1}, {2}, {0}};
  Fixture f(3, 2);
  auto opt = f.Make(Settings(EvictionPolicyKind::kOpt, /*prefetch_depth=*/0));
  RunIteration(*opt, script, [&](int t) {
    if (t == 2) CHECK(f.OnDevice(*opt) == std::set<int>{1, 2});  // LRU: 0 was used first
  });
  CHECK(f.OnDevice(*opt) == std::set<int>{0, 2});
  RunIteration(*opt, script, [&](int t) {
    if (t == 1) CHECK(f.OnDevice(*opt) == std::set<int>{1, 2});
  });

  Fixture g(3, 2);
  auto lru = g.Make(Settings(EvictionPolicyKind::kLru, /*prefetch_depth=*/0));
  RunIteration(*lru, script);
  RunIteration(*lru, script, [&](int t) {
    if (t == 1) CHECK(g.OnDevice(*lru) == std::set<int>{0, 1});
  });
  // Over the steady state Belady moves less.
  for (int it = 0; it < 4; ++it) {
    RunIteration(*opt, script);
    RunIteration(*lru, script);
  }
  CHECK(opt->stats().fetches < lru->stats().fetches);
}

TEST_CASE("prefetch brings the next moment's chunk, evicting only chunks needed later", "[residency][prefetch]") {
  const Script script = {{0}, {1}, {2}, {3}};
  Fixture f(4, 2);
  auto r = f.Make(Settings(EvictionPolicyKind::kOpt, /*prefetch_depth=*/1));
  RunIteration(*r, script);  // warm-up: no prefetch
  CHECK(r->stats().prefetches == 0);
  RunIteration(*r, script, [&](int t) {
    CHECK(r->on_device((t + 1) % 4));  // the next moment's chunk is there (or on its way)
  });
  CHECK(r->stats().prefetches >= 3);
  CHECK(r->stats().prefetch_hits >= 3);

  // Depth 2, two chunks fit: at moment 0 (chunk 0 in use), chunk 1 (next use 1) is
  // prefetched, but chunk 2 (next use 2) may not evict chunk 1, needed sooner.
  Fixture g(4, 2);
  auto deep = g.Make(Settings(EvictionPolicyKind::kOpt, /*prefetch_depth=*/2));
  RunIteration(*deep, script);
  RunIteration(*deep, script, [&](int t) {
    if (t == 0) CHECK(g.OnDevice(*deep) == std::set<int>{0, 1});
  });
}

TEST_CASE("pinned chunks are neither evicted, prefetched nor moved", "[residency][pin]") {
  const Script script = {{0}, {1}, {2}};
  Fixture f(3, 2);
  auto r = f.Make(Settings(EvictionPolicyKind::kOpt, /*prefetch_depth=*/1));
  RunIteration(*r, script);
  RunIteration(*r, script);
  // Between iterations (the optimizer's time): 1 and 2 on the device, 2 pinned. At
  // moment 0 Belady would evict 2 (next used at 2, after 1): the pin makes it evict 1.
  r->Place(0, Tier::kHost);
  r->Place(1, Tier::kDevice);
  r->Place(2, Tier::kDevice);
  r->Pin(2);
  CHECK_THROWS_WITH(r->Place(2, Tier::kHost), Catch::Contains("pinned"));
  r->BeginMoment("moment", 0);
  r->Acquire(0);
  CHECK(f.OnDevice(*r) == std::set<int>{0, 2});
  r->Prefetch();  // chunk 1 (next) could only evict 2, which is pinned
  CHECK(f.OnDevice(*r) == std::set<int>{0, 2});
  r->Unpin(2);
  r->Pin(1);
  r->Prefetch();  // 2 could go now, but 1 is pinned: not fetched
  CHECK(f.OnDevice(*r) == std::set<int>{0, 2});
  r->Unpin(1);
  r->Prefetch();
  CHECK(f.OnDevice(*r) == std::set<int>{0, 1});
  CHECK_THROWS(r->Unpin(1));  // not pinned any more
  r->Release(0);
}

TEST_CASE("a chunk in use cannot be placed; chunks in use beyond the budget name their users", "[residency][errors]") {
  Fixture f(3, 2);
  auto r = f.Make(Settings(EvictionPolicyKind::kOpt, 0));
  r->set_describe_users([](int chunk) { return "param" + std::to_string(chunk); });
  r->BeginMoment("forward", 0);
  r->Acquire(0);
  CHECK_THROWS_WITH(r->Place(0, Tier::kHost), Catch::Contains("in use"));
  r->Acquire(1);
  CHECK_THROWS_WITH(r->Acquire(2), Catch::Contains("by param0, param1") &&
                                       Catch::Contains("does not fit the device budget of 2048 bytes"));
}

TEST_CASE("give-way: other device bytes are released when eviction alone cannot make room", "[residency]") {
  Fixture f(2, 2);
  auto r = f.Make(Settings(EvictionPolicyKind::kOpt, 0));
  at::Tensor slot = f.store->Borrow(Tier::kDevice, kChunkNumel, at::kFloat, true);  // a staging slot
  int calls = 0;
  r->set_give_way([&](const std::function<bool()>& evict) {
    if (evict()) return true;
    ++calls;
    f.store->GiveBack(Tier::kDevice, slot);
    return evict();
  });
  r->BeginMoment("forward", 0);
  r->Acquire(0);  // fits beside the slot
  CHECK(calls == 0);
  r->Acquire(1);  // only once the slot gives way
  CHECK(calls == 1);
  CHECK(f.OnDevice(*r) == std::set<int>{0, 1});
}

// Non-model bytes the test scripts per moment.
class ScriptedProbe final : public DeviceMemoryProbe {
 public:
  int64_t peak = 0;
  int64_t NonModelBytes() override { return peak; }
  int64_t TakePeakNonModelBytes() override { return peak; }
  void Pause() override {}
  void Resume() override {}
};

TEST_CASE("traced budget: each moment holds the chunks its activations leave room for", "[residency][budget]") {
  // Device memory 6 KiB; non-model peaks per moment 1, 4, 2, 0 KiB: chunk budgets
  // 5, 2, 4, 6 KiB, all below the store's 8 KiB. Four chunks, each used once.
  const Script script = {{0}, {1}, {2}, {3}};
  const std::vector<int64_t> peaks = {1024, 4096, 2048, 0};
  Fixture f(4, 8);
  ResidencySettings s = Settings(EvictionPolicyKind::kOpt, 0);
  s.device_memory_bytes = 6 * 1024;
  auto r = f.Make(s, {/*warmup_device_bytes=*/1 * kChunkBytes, 0});  // the warm-up share: one chunk
  ScriptedProbe probe;
  r->set_probe(&probe);
  // Warm-up: one chunk at a time fits the share.
  RunIteration(*r, script, [&](int t) {
    probe.peak = peaks[t];
    CHECK(f.store->BytesUsed(Tier::kDevice) <= kChunkBytes);
  });
  CHECK(r->MinChunkBudgetBytes() == 2 * kChunkBytes);
  const std::vector<int64_t> budgets = {5 * 1024, 2 * 1024, 4 * 1024, 6 * 1024};
  for (int it = 0; it < 2; ++it) {
    RunIteration(*r, script, [&](int t) {
      probe.peak = peaks[t];
      CHECK(r->ChunkBudgetNow() == budgets[t]);
      CHECK(f.store->BytesUsed(Tier::kDevice) <= budgets[t]);
    });
  }
  CHECK(r->stats().budget_overruns == 0);
  CHECK(r->stats().peak_non_model_bytes == 4096);
}

TEST_CASE("traced budget: a moment whose chunks in use exceed what activations leave is an overrun", "[residency][budget]") {
  const Script script = {{0, 1, 2}, {3}};
  Fixture f(4, 4);
  ResidencySettings s = Settings(EvictionPolicyKind::kOpt, 0);
  s.device_memory_bytes = 4 * kChunkBytes;
  auto r = f.Make(s, {/*warmup_device_bytes=*/4 * kChunkBytes, 0});
  ScriptedProbe probe;
  r->set_probe(&probe);
  RunIteration(*r, script, [&](int t) { probe.peak = t == 0 ? 2 * kChunkBytes : 0; });
  CHECK(r->stats().budget_overruns == 1);  // moment 0: 3 chunks in use, 2 left by activations
  RunIteration(*r, script, [&](int t) {
    probe.peak = t == 0 ? 2 * kChunkBytes : 0;
    if (t == 0) CHECK(r->ChunkBudgetNow() == 3 * kChunkBytes);  // raised to the chunks in use
  });
}

// The optimizer step runs at the last moment's budget and takes the device update's
// scratch there: a last moment whose activations leave less than its chunks plus the
// scratch gets that much, an overrun.
TEST_CASE("traced budget: the last moment keeps room for the optimizer's scratch", "[residency][budget]") {
  const Script script = {{0}, {1}};
  Fixture f(4, 4);
  ResidencySettings s = Settings(EvictionPolicyKind::kOpt, 0);
  s.device_memory_bytes = 4 * kChunkBytes;
  auto r = f.Make(s, {/*warmup_device_bytes=*/4 * kChunkBytes, 0, /*device_scratch_bytes=*/kChunkBytes});
  ScriptedProbe probe;
  r->set_probe(&probe);
  // Activations leave 2 chunks at both moments: enough for one chunk in use, and at the
  // last moment for the scratch too; 3 chunks' worth at the last moment: raised.
  RunIteration(*r, script, [&](int t) { probe.peak = t == 0 ? 2 * kChunkBytes : 3 * kChunkBytes; });
  CHECK(r->stats().budget_overruns == 1);
  RunIteration(*r, script, [&](int t) {
    probe.peak = t == 0 ? 2 * kChunkBytes : 3 * kChunkBytes;
    CHECK(r->ChunkBudgetNow() == 2 * kChunkBytes);  // moment 0: what activations leave; 1: chunk + scratch
  });
}

// Evaluation (paused) runs at the lowest moment's budget, traced for other chunks in
// use: chunks in use beyond it still get their room up to the store's budget (an
// overrun), and beyond the store's budget it is the error naming them.
TEST_CASE("traced budget: while paused, chunks in use beyond the lowest budget get their room", "[residency][budget]") {
  const Script script = {{0}, {1}};
  Fixture f(4, 3);
  ResidencySettings s = Settings(EvictionPolicyKind::kOpt, 0);
  s.device_memory_bytes = 4 * kChunkBytes;
  auto r = f.Make(s, {/*warmup_device_bytes=*/kChunkBytes, 0});
  ScriptedProbe probe;
  r->set_probe(&probe);
  // Activations leave 1 chunk at moment 0 and 4 at moment 1 (the store holds 3).
  RunIteration(*r, script, [&](int t) { probe.peak = t == 0 ? 3 * kChunkBytes : 0; });
  RunIteration(*r, script, [&](int t) { probe.peak = t == 0 ? 3 * kChunkBytes : 0; });
  REQUIRE(r->MinChunkBudgetBytes() == kChunkBytes);
  const int64_t overruns = r->stats().budget_overruns;
  r->set_paused(true);
  CHECK(r->ChunkBudgetNow() == kChunkBytes);
  r->Acquire(2);
  r->Acquire(3);  // two chunks in use: over the lowest budget, within the store's
  CHECK(r->on_device(2));
  CHECK(r->on_device(3));
  CHECK(r->stats().budget_overruns == overruns + 1);
  r->Acquire(0);  // three: still within the store's 3 chunks
  CHECK(r->on_device(0));
  CHECK(r->stats().budget_overruns == overruns + 2);  // one per fetch beyond the budget
  CHECK_THROWS_WITH(r->Acquire(1), Catch::Contains("does not fit the device budget"));
  for (int c : {2, 3, 0}) r->Release(c);
  r->set_paused(false);
}

TEST_CASE("a restored warm-up is used from the first iteration", "[residency][resume]") {
  const Script script = {{0}, {1, 3}, {2}, {0}, {3}};
  Fixture f(4, 2);
  auto traced = f.Make(Settings(EvictionPolicyKind::kOpt, 1));
  RunIteration(*traced, script);
  const WarmupState saved = traced->SaveWarmup();

  Fixture g(4, 2);
  auto restored = g.Make(Settings(EvictionPolicyKind::kOpt, 1));
  restored->RestoreWarmup(saved);
  CHECK(restored->warmed_up());
  for (int t = 0; t < 5; ++t) CHECK(restored->trace().ChunksAt(t) == traced->trace().ChunksAt(t));
  RunIteration(*restored, script);
  CHECK(restored->stats().prefetches > 0);  // a fresh one traces its first iteration instead
  CHECK(restored->stats().iterations == 2);

  Fixture h(5, 2);
  auto other = h.Make(Settings(EvictionPolicyKind::kOpt, 1));
  CHECK_THROWS_WITH(other->RestoreWarmup(saved), Catch::Contains("4 chunks, this layout 5"));
}

}  // namespace
}  // namespace ps::chunkmem
