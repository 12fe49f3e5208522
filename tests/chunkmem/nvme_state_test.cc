// NvmeState (chunkmem/nvme_state.h) over a host store and this machine's disk: a tier
// chunk's master, m and v are store payloads only while mounted, views of its ring slot;
// bytes written while mounted come back exactly after the slots were reused; the ring is
// borrowed from the host budget once and given back; refusals.
#include "chunkmem/nvme_state.h"

#include <ATen/ATen.h>

#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/catch.h"
#include "tests/temp_dir.h"

using ps::testing::TempDir;

namespace ps::chunkmem {
namespace {

std::string FreshDir(const std::string& name) {
  const std::string dir = TempDir() + "/" + name;
  REQUIRE(system(("rm -rf '" + dir + "' && mkdir -p '" + dir + "'").c_str()) == 0);
  return dir;
}

ChunkStore HostStore(int64_t host_budget) {
  return ChunkStore(MakeHostAllocator(false), MakeDeviceAllocator(at::kCPU), host_budget, 1 << 20);
}

// Layout chunk c's state entries: fp32 master (unless `fp32_compute`) and bf16 m, v.
NvmeChunkIds AddState(ChunkStore& store, int64_t capacity, bool fp32_compute) {
  return {fp32_compute ? -1 : store.Add(capacity, at::kFloat), store.Add(capacity, at::kBFloat16),
          store.Add(capacity, at::kBFloat16)};
}

at::Tensor Pattern(int64_t n, at::ScalarType dtype, int seed) {
  return (at::arange(n, at::kFloat) * 0.25 + seed).to(dtype);
}

}  // namespace

TEST_CASE("NvmeState: state mounted on ring slots, exact after the slots were reused, ring on the host budget", "[nvme]") {
  ChunkStore store = HostStore(int64_t{64} << 20);
  const std::vector<int64_t> capacity = {1000, 0, 5000, 3000};  // chunk 1 is not on the tier
  std::vector<NvmeChunkIds> ids;
  for (size_t c = 0; c < capacity.size(); ++c) {
    ids.push_back(capacity[c] == 0 ? NvmeChunkIds{-1, -1, -1} : AddState(store, capacity[c], /*fp32_compute=*/c == 3));
  }
  {
    NvmeState nvme(store, ids, {FreshDir("state"), /*ring_slots=*/2, 4, 8192});
    // Extents (4 KiB-aligned parts): chunk 0 4,000 + 2 x 2,000 B; chunk 2, the largest,
    // 20,000 + 2 x 10,000 B; chunk 3 (no master) 2 x 6,000 B.
    CHECK(nvme.file_bytes() == (4096 + 4096 + 4096) + (20480 + 12288 + 12288) + (8192 + 8192));
    CHECK(nvme.ring_bytes() == NvmeRingBytes(2, 45056));
    CHECK(store.BytesUsed(Tier::kHost) == nvme.ring_bytes());  // counted once, as scratch
    CHECK(nvme.on_nvme(0));
    CHECK_FALSE(nvme.on_nvme(1));
    CHECK_THROWS_WITH(store.payload(ids[0][kNvmeM]), Catch::Contains("on the NVMe tier and not in the ring"));
    CHECK_THROWS(store.Allocate(ids[0][kNvmeM], Tier::kHost));

    for (int c : {0, 2, 3}) {  // start-up: every byte written by the caller, no read
      nvme.Acquire(c, /*read=*/false);
      for (int k = 0; k < 3; ++k) {
        if (ids[c][k] < 0) continue;
        const at::Tensor& p = store.payload(ids[c][k]);
        CHECK(p.numel() == capacity[c]);
        CHECK(reinterpret_cast<uintptr_t>(p.data_ptr()) % 4096 == 0);
        p.copy_(Pattern(capacity[c], p.scalar_type(), 10 * c + k));
      }
      nvme.Release(c, /*written=*/true);
      CHECK_THROWS(store.payload(ids[c][kNvmeM]));
    }
    nvme.Flush();
    for (int step = 1; step <= 3; ++step) {  // two slots, three chunks: every Acquire reads
      nvme.BeginStep({0, 2, 3});
      for (int c : {0, 2, 3}) {
        nvme.Acquire(c);
        for (int k = 0; k < 3; ++k) {
          if (ids[c][k] < 0) continue;
          const at::Tensor& p = store.payload(ids[c][k]);
          CHECK(at::equal(p, Pattern(capacity[c], p.scalar_type(), 10 * c + k + step - 1)));
          p.copy_(Pattern(capacity[c], p.scalar_type(), 10 * c + k + step));
        }
        nvme.Release(c, /*written=*/true);
      }
      nvme.Flush();
    }
    CHECK(nvme.ring_stats().read_bytes >= 2 * 45056);  // the slots were reused: reads happened
    CHECK(nvme.file_stats().read_bytes == nvme.ring_stats().read_bytes);
    {
      NvmeMount mount(nvme, 3);
      CHECK(at::equal(store.payload(ids[3][kNvmeV]), Pattern(3000, at::kBFloat16, 30 + 2 + 3)));
    }
    CHECK_THROWS(store.payload(ids[3][kNvmeV]));
    // A mount whose scope ends by an exception is abandoned, though marked written: its
    // half-filled bytes never reach the file, and the chunk reads back as before.
    const int64_t written = nvme.ring_stats().written_bytes;
    try {
      NvmeMount mount(nvme, 3, /*read=*/false);
      mount.set_written();
      store.payload(ids[3][kNvmeV]).fill_(7.0);  // half-filled: m is not written
      throw std::runtime_error("the fill failed");
    } catch (const std::runtime_error&) {
    }
    nvme.Flush();
    CHECK(nvme.ring_stats().written_bytes == written);
    {
      NvmeMount mount(nvme, 3);
      CHECK(at::equal(store.payload(ids[3][kNvmeV]), Pattern(3000, at::kBFloat16, 30 + 2 + 3)));
    }
  }
  CHECK(store.BytesUsed(Tier::kHost) == 0);  // the ring went back
}

TEST_CASE("NvmeState: no more ring slots than chunks on the tier, and at least 2", "[nvme]") {
  CHECK(NvmeRingSlots(4, 1) == 2);
  CHECK(NvmeRingSlots(4, 3) == 3);
  CHECK(NvmeRingSlots(4, 100) == 4);
  CHECK(NvmeRingSlots(2, 0) == 2);
  ChunkStore store = HostStore(int64_t{64} << 20);
  std::vector<NvmeChunkIds> ids;
  for (int c = 0; c < 3; ++c) ids.push_back(AddState(store, 1000, false));  // extents of 12,288 bytes
  {
    NvmeState nvme(store, {ids[0]}, {FreshDir("slots_one"), /*ring_slots=*/8, 4, 8192});
    CHECK(nvme.ring_bytes() == NvmeRingBytes(2, 12288));
    CHECK(store.BytesUsed(Tier::kHost) == nvme.ring_bytes());
  }
  NvmeState nvme(store, ids, {FreshDir("slots_three"), /*ring_slots=*/8, 4, 8192});
  CHECK(nvme.ring_bytes() == NvmeRingBytes(3, 12288));
  for (int round = 0; round < 2; ++round) {  // every chunk through the three slots, twice
    for (int c = 0; c < 3; ++c) {
      NvmeMount mount(nvme, c);
      if (round == 0) {
        mount.set_written();
        store.payload(ids[c][kNvmeM]).copy_(Pattern(1000, at::kBFloat16, c));
      } else {
        CHECK(at::equal(store.payload(ids[c][kNvmeM]), Pattern(1000, at::kBFloat16, c)));
      }
    }
  }
}

TEST_CASE("NvmeState: a ring the host budget cannot take is refused", "[nvme]") {
  ChunkStore store = HostStore(30000);
  std::vector<NvmeChunkIds> ids = {AddState(store, 4000, false)};  // extent 16,384 + 8,192 + 8,192
  CHECK_THROWS_WITH(NvmeState(store, ids, {FreshDir("small"), 2, 4, 8192}),
                    Catch::Contains("the NVMe tier's ring (") && Catch::Contains("does not fit the host budget"));
  CHECK_THROWS_WITH(NvmeState(store, ids, {FreshDir("one"), 1, 4, 8192}), Catch::Contains("nvme_ring_slots"));
}

}  // namespace ps::chunkmem
