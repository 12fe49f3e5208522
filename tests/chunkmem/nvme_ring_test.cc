// NvmeRing (chunkmem/nvme_ring.h) on this machine's disk against scripted steps: bytes
// stay exact over steps (what a chunk read back holds is what was last written), reads
// start ahead in the step's order and, after its last chunk, for the next step; a
// chunk in a slot is served without a read; at most S - 1 chunks in use; misuse refused.
#include "chunkmem/nvme_ring.h"

#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/catch.h"
#include "tests/file_size_limit.h"
#include "tests/temp_dir.h"

using ps::testing::TempDir;

namespace ps::chunkmem {
namespace {

constexpr int64_t kPage = kNvmeAlignBytes;

struct Free {
  void operator()(void* p) const { std::free(p); }
};

// A ring over `pages[c]` pages per chunk (0: not on the tier) with `slots` slots, and the
// expected bytes of every chunk.
struct Fixture {
  Fixture(const std::vector<int64_t>& pages, int slots, const std::string& name) {
    const std::string dir = TempDir() + "/" + name;
    REQUIRE(system(("rm -rf '" + dir + "' && mkdir -p '" + dir + "'").c_str()) == 0);
    int64_t at = 0, largest = 0;
    for (int64_t p : pages) {
      extents.push_back({at, p * kPage});
      at += p * kPage;
      largest = std::max(largest, p * kPage);
      expected.emplace_back(p * kPage, 0);
    }
    file = std::make_unique<NvmeFile>(dir, at, 4, 2 * kPage);
    std::vector<void*> raw;
    for (int i = 0; i < slots; ++i) {
      void* b = nullptr;
      REQUIRE(posix_memalign(&b, kPage, largest) == 0);
      buffers.emplace_back(b);
      raw.push_back(b);
    }
    ring = std::make_unique<NvmeRing>(*file, extents, raw);
  }
  // The chunk's new bytes (a function of the chunk and the step) into its slot and `expected`.
  void Update(int chunk, int step) {
    auto* p = static_cast<unsigned char*>(ring->Acquire(chunk));
    REQUIRE(std::memcmp(p, expected[chunk].data(), expected[chunk].size()) == 0);
    for (size_t i = 0; i < expected[chunk].size(); ++i) {
      expected[chunk][i] = static_cast<unsigned char>(i * 7 + chunk * 31 + step * 101);
    }
    std::memcpy(p, expected[chunk].data(), expected[chunk].size());
    ring->Release(chunk, /*written=*/true);
  }
  std::vector<NvmeExtent> extents;
  std::vector<std::vector<unsigned char>> expected;
  std::unique_ptr<NvmeFile> file;
  std::vector<std::unique_ptr<void, Free>> buffers;
  std::unique_ptr<NvmeRing> ring;  // last: goes first
};

}  // namespace

TEST_CASE("NvmeRing: bytes stay exact over steps, reads go ahead in the order and into the next step", "[nvme]") {
  Fixture f({2, 1, 3, 0, 2, 1}, /*slots=*/3, "exact");  // chunk 3 is not on the tier
  // Start-up: every chunk written once, outside any step (zeros first: the file's own).
  for (int c : {0, 1, 2, 4, 5}) f.Update(c, 0);
  f.ring->Flush();
  const std::vector<int> order = {0, 1, 2, 4, 5};
  for (int step = 1; step <= 4; ++step) {
    f.ring->Flush();  // the last step's writes are done by the next step (forward and backward)
    f.ring->BeginStep(order);
    // The window (S - 1 = 2 chunks) is read or being read before the first Acquire.
    CHECK(f.ring->SlotOf(order[0]) >= 0);
    CHECK(f.ring->SlotOf(order[1]) >= 0);
    for (size_t k = 0; k < order.size(); ++k) {
      f.Update(order[k], step);
      if (step == 2) {  // once the writes are done, the freed slots read the next S - 1 (wrapping)
        f.ring->Flush();
        f.ring->Poll();
        CHECK(f.ring->SlotOf(order[(k + 1) % order.size()]) >= 0);
        CHECK(f.ring->SlotOf(order[(k + 2) % order.size()]) >= 0);
      }
    }
  }
  f.ring->Flush();
  // Every chunk read back outside a step equals its last write.
  for (int c : {5, 0, 4, 2, 1}) {
    auto* p = static_cast<unsigned char*>(f.ring->Acquire(c));
    CHECK(std::memcmp(p, f.expected[c].data(), f.expected[c].size()) == 0);
    f.ring->Release(c, /*written=*/false);
  }
  const NvmeRingStats s = f.ring->stats();
  CHECK(s.written_bytes == 5 * 9 * kPage);  // start-up + 4 steps, 9 pages each
  CHECK(f.file->stats().written_bytes == s.written_bytes);
}

TEST_CASE("NvmeRing: with writes in flight, a chunk read again is its newest bytes (no read behind its write)",
          "[nvme]") {
  // Two slots and three chunks, no Flush: every Acquire finds writes in flight, and a
  // chunk's next read may be asked for while its own write is still going.
  Fixture f({3, 1, 2}, /*slots=*/2, "in_flight");
  for (int c : {0, 1, 2}) f.Update(c, 0);
  for (int step = 1; step <= 40; ++step) {
    f.ring->BeginStep({0, 1, 2});
    for (int c : {0, 1, 2}) f.Update(c, step);  // checks the bytes it acquires
    if (step % 3 == 0) f.Update(step % 2, 1000 + step);  // out of order, right after its write
  }
  f.ring->Flush();
  for (int c : {2, 1, 0}) {
    auto* p = static_cast<unsigned char*>(f.ring->Acquire(c));
    CHECK(std::memcmp(p, f.expected[c].data(), f.expected[c].size()) == 0);
    f.ring->Release(c, /*written=*/false);
  }
}

TEST_CASE("NvmeRing: chunks that fit the slots are read once, then served from them", "[nvme]") {
  Fixture f({1, 2}, /*slots=*/3, "clean");
  for (int step = 0; step < 3; ++step) {
    f.ring->BeginStep({0, 1});
    f.Update(0, step);
    f.Update(1, step);
  }
  f.ring->Flush();
  const NvmeRingStats s = f.ring->stats();
  CHECK(s.read_bytes == 3 * kPage);  // each chunk's first read only
  CHECK(s.clean_hits >= 4);
  CHECK(s.written_bytes == 3 * 3 * kPage);
}

// A write-back the disk refuses (EFBIG past a limit, as a full disk) is not thrown by
// Release (a scope guard may release) but by the next call, naming the file's error; the
// chunks whose writes went through keep their bytes; the refused chunk is lost: never
// read again (the file's copy is stale) until a caller fills it whole. In a child process.
TEST_CASE("NvmeRing: a refused write-back is thrown by the next call; written chunks keep their bytes", "[nvme]") {
  const int status = testing::RunInChild([] {
    Fixture f({1, 1, 1}, /*slots=*/2, "refused");
    testing::LimitFileSize(kPage);  // chunk 0 (the first page) can be written, 1 and 2 cannot
    f.ring->BeginStep({0, 1, 2});
    f.Update(0, 1);
    f.ring->Acquire(1);
    f.ring->Release(1, /*written=*/true);  // refused in the background
    try {
      f.ring->Flush();
      return 2;  // not thrown
    } catch (const std::runtime_error& e) {
      if (std::string(e.what()).find("File too large") == std::string::npos) return 3;
    }
    auto lost = [&](const std::function<void()>& call) {
      try {
        call();
      } catch (const std::runtime_error& e) {
        const std::string what = e.what();
        return what.find("chunk 1 is lost") != std::string::npos && what.find("File too large") != std::string::npos;
      }
      return false;
    };
    if (!lost([&] { f.ring->Acquire(1); })) return 6;
    if (!lost([&] { f.ring->BeginStep({0, 1, 2}); })) return 7;
    f.ring->BeginStep({0, 2});  // the others still work
    f.Update(0, 2);
    f.ring->Acquire(1, /*read=*/false);  // a caller that fills it whole may
    f.ring->Abandon(1);
    if (!lost([&] { f.ring->Acquire(1); })) return 8;
    f.ring->Flush();
    f.ring.reset();  // chunk 0's bytes from the file itself, not from a slot's clean copy
    void* page = nullptr;
    if (posix_memalign(&page, kPage, kPage) != 0) return 5;
    std::unique_ptr<void, Free> own(page);
    f.file->Wait(f.file->Read(f.extents[0].offset_bytes, page, kPage));
    return std::memcmp(page, f.expected[0].data(), f.expected[0].size()) == 0 ? 0 : 4;
  });
  INFO("child exit status " << status);
  CHECK(status == 0);
}

TEST_CASE("NvmeRing: at most S - 1 chunks in use; misuse is refused", "[nvme]") {
  Fixture f({1, 1, 1, 0}, /*slots=*/2, "misuse");
  f.ring->Acquire(0);
  CHECK_THROWS_WITH(f.ring->Acquire(0), Catch::Contains("acquired twice"));
  CHECK_THROWS_WITH(f.ring->Acquire(1), Catch::Contains("every slot is in use"));
  CHECK_THROWS_WITH(f.ring->Release(1, true), Catch::Contains("released but not acquired"));
  CHECK_THROWS_WITH(f.ring->Acquire(3), Catch::Contains("not on the tier"));
  CHECK_THROWS_WITH(f.ring->BeginStep({0, 3}), Catch::Contains("not on the tier"));
  f.ring->Release(0, false);
  CHECK_NOTHROW(f.ring->Acquire(1));
  f.ring->Release(1, false);
  // Acquired without a read and released unwritten: the slot holds no copy of the chunk.
  f.ring->Acquire(2, /*read=*/false);
  f.ring->Release(2, false);
  CHECK(f.ring->SlotOf(2) == -1);
}

}  // namespace ps::chunkmem
