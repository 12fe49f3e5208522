// Belady decisions on scripted traces (furthest next use, never-used chunks, wrap-around,
// ties, byte accounting) and the LRU fallback.
#include "chunkmem/eviction.h"
#include "tests/catch.h"

namespace ps::chunkmem {
namespace {

// Moments 0..5; chunk 0 used at 0 and 5, chunk 1 at 1, chunk 2 at 2 and 4, chunk 3 at 3,
// chunk 4 never.
AccessTrace Scripted() {
  AccessTrace t;
  for (auto [chunk, moment] : std::vector<std::pair<int, int>>{{0, 0}, {1, 1}, {2, 2}, {3, 3}, {2, 4}, {0, 5}}) {
    t.Record(chunk, moment);
  }
  return t;
}

std::vector<EvictionCandidate> Candidates(std::vector<int> ids, int64_t bytes = 10) {
  std::vector<EvictionCandidate> out;
  for (int id : ids) out.push_back({id, bytes});
  return out;
}

TEST_CASE("next use: ahead, wrap-around, never used", "[eviction][belady]") {
  const AccessTrace t = Scripted();
  CHECK(t.total_moments() == 6);
  CHECK(t.NextUse(0, 1) == 5);
  CHECK(t.NextUse(2, 2) == 4);       // strictly after the current moment
  CHECK(t.NextUse(1, 3) == 6 + 1);   // wraps into the next iteration
  CHECK(t.NextUse(0, 5) == 6 + 0);
  CHECK(t.NextUse(4, 0) == 13);      // never used: furthest of all
}

TEST_CASE("Belady evicts the furthest next use first", "[eviction][belady]") {
  const AccessTrace t = Scripted();
  BeladyPolicy policy(t);
  // At moment 2: next uses are 0 -> 5, 1 -> 7 (wrap), 3 -> 3.
  CHECK(policy.Choose(Candidates({0, 1, 3}), 10, 2) == std::vector<int>{1});
  CHECK(policy.Choose(Candidates({0, 1, 3}), 25, 2) == std::vector<int>{1, 0, 3});
  // A never-used chunk goes before everything.
  CHECK(policy.Choose(Candidates({0, 4, 1}), 10, 2) == std::vector<int>{4});
  // Need already covered by the first: only one is taken; need 0 takes none.
  CHECK(policy.Choose(Candidates({0, 1}, 100), 50, 2) == std::vector<int>{1});
  CHECK(policy.Choose(Candidates({0, 1}), 0, 2).empty());
}

TEST_CASE("Belady ties go to the lower chunk id", "[eviction][belady]") {
  AccessTrace t;
  t.Record(5, 0);
  t.Record(2, 0);
  t.Record(7, 0);
  t.Record(1, 3);
  BeladyPolicy policy(t);
  // At moment 1, chunks 2, 5, 7 are all next used at 4 (wrap); chunk 1 at 3.
  CHECK(policy.Choose(Candidates({7, 5, 2, 1}), 30, 1) == std::vector<int>{2, 5, 7});
}

TEST_CASE("when candidates cannot free enough, all of them are returned", "[eviction]") {
  const AccessTrace t = Scripted();
  BeladyPolicy policy(t);
  CHECK(policy.Choose(Candidates({0, 1}), 1000, 0) == std::vector<int>{0, 1});
}

TEST_CASE("LRU evicts the least recently touched, never-touched first", "[eviction][lru]") {
  LruPolicy lru;
  lru.Touch(0, 5);
  lru.Touch(1, 2);
  lru.Touch(2, 9);
  CHECK(lru.Choose(Candidates({0, 1, 2, 3}), 20, 0) == std::vector<int>{3, 1});
  lru.Touch(1, 10);
  CHECK(lru.Choose(Candidates({0, 1, 2}), 10, 0) == std::vector<int>{0});
}

}  // namespace
}  // namespace ps::chunkmem
