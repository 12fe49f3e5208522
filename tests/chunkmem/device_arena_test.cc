// DeviceArena on the CPU (the simulated tier): first fit, alignment, coalescing of freed
// ranges, refusal when no range is large enough, and ranges that outlive the arena.
// The host pool's mapped backing (MapResidentHostBytes): aligned, zero, resident, unmapped.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "chunkmem/device_arena.h"
#include "chunkmem/host_mapping.h"
#include "tests/catch.h"

namespace ps::chunkmem {
namespace {

TEST_CASE("arena: first fit, aligned, exact capacity", "[arena]") {
  DeviceArena arena(at::kCPU, 8192);
  CHECK(arena.capacity_bytes() == 8192);
  at::Tensor a = arena.TryAllocate(120, at::kFloat);   // 480 B -> 512
  at::Tensor b = arena.TryAllocate(1000, at::kHalf);   // 2000 B -> 2048
  REQUIRE(a.defined());
  REQUIRE(b.defined());
  CHECK(a.numel() == 120);
  CHECK(b.scalar_type() == at::kHalf);
  const auto base = reinterpret_cast<uintptr_t>(a.data_ptr());
  CHECK(reinterpret_cast<uintptr_t>(b.data_ptr()) - base == 512);
  CHECK(arena.free_bytes() == 8192 - 512 - 2048);
  a.fill_(1.5f);
  b.fill_(2);
  CHECK(a.sum().item<float>() == 180.0f);  // the two payloads do not overlap
  CHECK(b.to(at::kFloat).sum().item<float>() == 2000.0f);
  CHECK_FALSE(arena.TryAllocate(2000, at::kFloat).defined());  // 8000 B > what is left
  // One byte still takes a whole aligned unit: the next payload starts 64 bytes on.
  at::Tensor c = arena.TryAllocate(1, at::kByte), d = arena.TryAllocate(1, at::kByte);
  REQUIRE(c.defined());
  REQUIRE(d.defined());
  CHECK(reinterpret_cast<uintptr_t>(c.data_ptr()) - base == 512 + 2048);
  CHECK(reinterpret_cast<uintptr_t>(d.data_ptr()) - reinterpret_cast<uintptr_t>(c.data_ptr()) == DeviceArena::kAlignBytes);
}

TEST_CASE("arena: freed ranges coalesce; fragmentation refuses, then heals", "[arena]") {
  DeviceArena arena(at::kCPU, 4 * 1024);
  at::Tensor r0 = arena.TryAllocate(256, at::kFloat);  // 1024 B each
  at::Tensor r1 = arena.TryAllocate(256, at::kFloat);
  at::Tensor r2 = arena.TryAllocate(256, at::kFloat);
  at::Tensor r3 = arena.TryAllocate(256, at::kFloat);
  CHECK(arena.free_bytes() == 0);
  r0 = at::Tensor();
  r2 = at::Tensor();
  CHECK(arena.free_bytes() == 2048);
  CHECK(arena.largest_free_bytes() == 1024);        // two holes of 1 KiB
  CHECK_FALSE(arena.CanFit(2048));
  CHECK_FALSE(arena.TryAllocate(512, at::kFloat).defined());
  r1 = at::Tensor();                                // r0 + r1 + r2 merge into 3 KiB
  CHECK(arena.largest_free_bytes() == 3072);
  at::Tensor big = arena.TryAllocate(768, at::kFloat);
  REQUIRE(big.defined());
  CHECK(arena.free_bytes() == 0);
  big = at::Tensor();
  r3 = at::Tensor();
  CHECK(arena.free_bytes() == 4096);
  CHECK(arena.largest_free_bytes() == 4096);
}

TEST_CASE("arena: long-lived payloads come from the top, moving ones from the bottom", "[arena]") {
  DeviceArena arena(at::kCPU, 4096);
  at::Tensor low = arena.TryAllocate(256, at::kFloat);                     // [0, 1024)
  at::Tensor high = arena.TryAllocate(256, at::kFloat, /*long_lived=*/true);  // [3072, 4096)
  const auto base = reinterpret_cast<uintptr_t>(low.data_ptr());
  CHECK(reinterpret_cast<uintptr_t>(high.data_ptr()) - base == 3072);
  low = at::Tensor();  // the free space stays one range: no hole between the two kinds
  CHECK(arena.largest_free_bytes() == 3072);
  CHECK(arena.free_bytes() == 3072);
}

TEST_CASE("arena: a payload may outlive the arena object", "[arena]") {
  at::Tensor survivor;
  {
    DeviceArena arena(at::kCPU, 4096);
    survivor = arena.TryAllocate(10, at::kFloat);
    survivor.fill_(3.0f);
  }
  CHECK(survivor.sum().item<float>() == 30.0f);
  survivor = at::Tensor();  // returns its range to the (kept alive) free list: no crash
}

TEST_CASE("arena: bad size is refused", "[arena]") {
  CHECK_THROWS_WITH(DeviceArena(at::kCPU, 0), Catch::Contains("must be > 0"));
}

TEST_CASE("arena: peak use since construction; which pointers are inside", "[arena]") {
  DeviceArena arena(at::kCPU, 4096);
  CHECK(arena.peak_used_bytes() == 0);
  at::Tensor a = arena.TryAllocate(256, at::kFloat);  // 1024 B
  at::Tensor b = arena.TryAllocate(10, at::kFloat);   // 40 B -> 64
  CHECK(arena.peak_used_bytes() == 1088);
  CHECK(arena.Contains(a.data_ptr()));
  CHECK(arena.Contains(static_cast<char*>(b.data_ptr()) + 39));
  const at::Tensor outside = at::empty({16});
  CHECK_FALSE(arena.Contains(outside.data_ptr()));
  a = at::Tensor();
  b = at::Tensor();
  CHECK(arena.free_bytes() == 4096);
  CHECK(arena.peak_used_bytes() == 1088);  // a peak, not the current use
  at::Tensor c = arena.TryAllocate(512, at::kFloat);
  CHECK(arena.peak_used_bytes() == 2048);
}

TEST_CASE("host mapping: huge-page aligned, every page resident and zero on return, unmapped when released",
          "[arena][mapping]") {
  const int64_t bytes = 3 * kHugePageBytes + 12345;  // a partial last huge page and base page
  const int threads = at::get_num_threads();
  for (const int t : {1, 2}) {  // one thread and several: the same pages, whoever faults them in
    at::set_num_threads(t);
    at::Tensor m = MapResidentHostBytes(bytes);
    REQUIRE(m.numel() == bytes);
    CHECK(m.scalar_type() == at::kByte);
    CHECK(m.device().is_cpu());
    auto* p = static_cast<unsigned char*>(m.data_ptr());
    CHECK(reinterpret_cast<uintptr_t>(p) % kHugePageBytes == 0);
    const long page = sysconf(_SC_PAGESIZE);
    std::vector<unsigned char> resident((bytes + page - 1) / page);
    REQUIRE(mincore(p, bytes, resident.data()) == 0);
    int64_t missing = 0;
    for (unsigned char r : resident) missing += (r & 1) == 0;
    CHECK(missing == 0);  // made resident before the call returned
    // The trimmed tail is gone: the page after the last (partial) page is not mapped.
    // (One thread only: pool threads starting could map memory into the gap meanwhile.)
    if (t == 1) {
      const int64_t mapped = (bytes + page - 1) / page * page;
      unsigned char after = 0;
      CHECK(mincore(p + mapped, page, &after) == -1);
      CHECK(errno == ENOMEM);
    }
    CHECK(m.sum().item<int64_t>() == 0);
    p[bytes - 1] = 7;  // the whole range is writable
    CHECK(m[bytes - 1].item<int>() == 7);
    at::Tensor view = m.narrow(0, kHugePageBytes, 16);  // a view keeps the mapping
    m.reset();
    CHECK(view.sum().item<int64_t>() == 0);
    view.reset();  // the last reference: unmapped (mincore on an unmapped range fails with ENOMEM)
    CHECK(mincore(p, bytes, resident.data()) == -1);
    CHECK(errno == ENOMEM);
  }
  at::set_num_threads(threads);
  CHECK_THROWS_WITH(MapResidentHostBytes(0), Catch::Contains("needs a size > 0"));
  // More than the machine has is an error before any page is touched, not the OOM killer.
  CHECK_THROWS_WITH(MapResidentHostBytes(int64_t{1} << 60), Catch::Contains("available memory"));
}

}  // namespace
}  // namespace ps::chunkmem
