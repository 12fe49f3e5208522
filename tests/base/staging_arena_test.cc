// base::StagingArena: pieces in use never overlap and never exceed the arena, a request
// waits for room and proceeds when pieces come back, returned ranges join up again, and
// the arena's memory is reused (the same addresses), not allocated per piece.
#include <ATen/core/Tensor.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "base/staging_arena.h"
#include "tests/catch.h"

namespace ps::base {
namespace {

const float* Begin(const StagingArena::Lease& lease) { return lease.values().data_ptr<float>(); }

TEST_CASE("StagingArena: a piece is the size asked for, and reused after it comes back", "[staging_arena]") {
  StagingArena arena(1000);
  const float* first = nullptr;
  {
    StagingArena::Lease a = arena.Take(1000);
    CHECK(a.values().numel() == 1000);
    CHECK(a.values().is_contiguous());
    CHECK(a.values().scalar_type() == at::kFloat);
    CHECK(arena.in_use_numel() >= 1000);
    first = Begin(a);
  }
  CHECK(arena.in_use_numel() == 0);
  for (int64_t n : {900, 500, 7, 1}) {  // decreasing sizes, one at a time: always the same memory
    StagingArena::Lease b = arena.Take(n);
    CHECK(b.values().numel() == n);
    CHECK(Begin(b) == first);
  }
  CHECK_THROWS_AS(arena.Take(-1), std::invalid_argument);
  CHECK(arena.Take(0).values().numel() == 0);
}

TEST_CASE("StagingArena: pieces in use are disjoint, 64-byte aligned, and join up when returned", "[staging_arena]") {
  StagingArena arena(64 * 3);
  std::optional<StagingArena::Lease> a(arena.Take(64)), b(arena.Take(60)), c(arena.Take(64));
  CHECK(Begin(*b) >= Begin(*a) + 64);
  CHECK(Begin(*c) >= Begin(*b) + 60);
  for (const auto* l : {&*a, &*b, &*c}) CHECK(reinterpret_cast<uintptr_t>(Begin(*l)) % 64 == 0);
  const float* start = Begin(*a);
  a.reset();
  b.reset();  // a's and b's ranges are one free range again: 128 values fit at the start
  StagingArena::Lease d = arena.Take(128);  // (without the join it would wait forever)
  CHECK(Begin(d) == start);
  c.reset();
  CHECK(arena.in_use_numel() == 128);
}

TEST_CASE("StagingArena: a request that does not fit waits until a piece comes back", "[staging_arena]") {
  StagingArena arena(1024);
  std::optional<StagingArena::Lease> held(arena.Take(600));
  std::atomic<bool> taken{false};
  std::thread waiter([&] {
    StagingArena::Lease l = arena.Take(600);  // 424 values free: must wait
    taken = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CHECK_FALSE(taken.load());
  held.reset();
  waiter.join();
  CHECK(taken.load());
  CHECK(arena.in_use_numel() == 0);
}

// Waits (a bounded while) until `n` requests for the arena are asleep waiting.
bool UntilWaiting(const StagingArena& arena, int n) {
  for (int i = 0; i < 5000 && arena.arena_requests_waiting() < n; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return arena.arena_requests_waiting() == n;
}

TEST_CASE("StagingArena: requests are served in arrival order; a small one does not overtake a waiting large one",
          "[staging_arena]") {
  StagingArena arena(1024);
  std::optional<StagingArena::Lease> piece(arena.Take(100));
  std::atomic<int> order{0}, whole_at{0}, small_at{0};
  std::thread whole([&] {
    StagingArena::Lease l = arena.Take(1024);  // the whole arena: waits for the piece
    whole_at = ++order;
  });
  REQUIRE(UntilWaiting(arena, 1));
  std::thread small([&] {
    StagingArena::Lease l = arena.Take(10);  // 924 values free, but the whole-arena request came first
    small_at = ++order;
  });
  CHECK(UntilWaiting(arena, 2));  // asleep beside the room it would fit in
  CHECK(small_at.load() == 0);
  piece.reset();
  whole.join();
  small.join();
  CHECK(whole_at.load() == 1);
  CHECK(small_at.load() == 2);
  CHECK(arena.in_use_numel() == 0);
}

TEST_CASE("StagingArena: a request larger than the arena gets a buffer of its own, alone, before the arena's",
          "[staging_arena]") {
  StagingArena arena(1024);
  std::optional<StagingArena::Lease> piece(arena.Take(100));
  CHECK(arena.held_numel() == 1024);
  std::atomic<int> big_stage{0};
  std::atomic<bool> small_taken{false}, small_taken_while_big_out{false};
  std::atomic<int64_t> big_numel{0}, held_while_big_out{0};
  std::thread big([&] {
    StagingArena::Lease l = arena.Take(5000);  // waits for the piece in use
    big_stage = 1;
    l.values().fill_(1.0f);
    big_numel = l.values().numel();
    held_while_big_out = arena.held_numel();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    small_taken_while_big_out = small_taken.load();
    big_stage = 2;
  });
  while (arena.own_buffers_waiting() == 0) std::this_thread::yield();  // big waits now
  std::thread small([&] {
    StagingArena::Lease l = arena.Take(10);  // room in the arena, but the larger request goes first
    small_taken = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const bool big_waited_for_piece = big_stage.load() == 0;
  const bool small_waited_for_big = !small_taken.load();
  piece.reset();
  big.join();
  small.join();
  CHECK(big_waited_for_piece);
  CHECK(small_waited_for_big);
  CHECK_FALSE(small_taken_while_big_out.load());
  CHECK(big_numel == 5000);
  CHECK(held_while_big_out == 5008);  // the arena's memory freed for it: never both held
  StagingArena::Lease after = arena.Take(10);
  CHECK(arena.held_numel() == 1024);  // the arena again (its address may differ)
  CHECK(arena.in_use_numel() == 16);
}

TEST_CASE("StagingArena: a buffer that cannot be allocated throws and leaves the arena usable", "[staging_arena]") {
  StagingArena arena(1024);
  CHECK_THROWS(arena.Take(int64_t{1} << 60));  // 4 EiB: the allocation fails
  CHECK(arena.in_use_numel() == 0);
  CHECK(arena.held_numel() == 0);
  StagingArena::Lease l = arena.Take(10);
  CHECK(l.values().numel() == 10);
  CHECK(arena.held_numel() == 1024);
}

TEST_CASE("StagingArena: many threads, the pieces in use never overlap nor exceed the arena", "[staging_arena]") {
  constexpr int64_t kCapacity = 4096;
  StagingArena arena(kCapacity);
  std::mutex mutex;
  std::vector<std::pair<const float*, int64_t>> live;  // the pieces in use now
  std::atomic<int> overlaps{0}, over_capacity{0}, outside{0}, done{0};
  const float* base = Begin(arena.Take(1));
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 300; ++i) {
        const int64_t n = 1 + (i * 131 + t * 977) % kCapacity;  // some larger than half the arena
        StagingArena::Lease l = arena.Take(n);
        const float* p = Begin(l);
        {
          std::lock_guard<std::mutex> lock(mutex);
          if (p < base || p + n > base + arena.capacity_numel()) outside++;
          for (const auto& [q, m] : live) {
            if (p < q + m && q < p + n) overlaps++;
          }
          live.emplace_back(p, n);
          if (arena.in_use_numel() > kCapacity) over_capacity++;
        }
        l.values().fill_(static_cast<float>(t));
        {
          std::lock_guard<std::mutex> lock(mutex);
          live.erase(std::find(live.begin(), live.end(), std::make_pair(p, n)));
        }
      }
      done++;
    });
  }
  for (auto& th : threads) th.join();
  CHECK(done == 6);
  CHECK(overlaps == 0);
  CHECK(over_capacity == 0);
  CHECK(outside == 0);
  CHECK(arena.in_use_numel() == 0);
}

}  // namespace
}  // namespace ps::base
