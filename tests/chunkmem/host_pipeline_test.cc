// HostPipeline against scripted chunk tiers on the simulated device (no runtime, no
// optimizer): the order of its moves around each update (chunk k+1 on its way to the
// host before chunk k's update runs, k back after it), a chunk returns to the device
// only when it fits without evicting, staging for chunks that stay on the device (one
// copy per run of adjacent written ranges, gaps untouched, the buffers given back, the
// fallback to moving when the host cannot lend them), updates in place batched into
// one run, and holding chunks for updates ahead (brought, pinned, unpinned, returned;
// never a chunk pinned by another part). The moves go through ResidencyMoves, the
// implementation the runtime hands the optimizer, over a real Residency and store,
// recorded.
#include <ATen/ATen.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "chunkmem/chunk_store.h"
#include "chunkmem/copy_engine.h"
#include "chunkmem/host_pipeline.h"
#include "chunkmem/optimizer_moves.h"
#include "chunkmem/residency.h"
#include "tests/catch.h"

namespace ps::chunkmem {
namespace {

constexpr int64_t kChunkNumel = 256;

// The moves of a ResidencyMoves, recorded as they happen: "host c" (a chunk left the
// device), "back c" / "stays c" (ReturnToDeviceIfRoom), "device c", "write c off+n",
// "pin c", "unpin c". The updates add "update c" and "run".
class RecordedMoves : public OptimizerMoves {
 public:
  RecordedMoves(OptimizerMoves& inner, std::vector<std::string>& log) : inner_(inner), log_(log) {}
  bool on_device(int chunk) const override { return inner_.on_device(chunk); }
  bool in_use(int chunk) const override { return inner_.in_use(chunk); }
  bool pinned(int chunk) const override { return inner_.pinned(chunk); }
  void ToHost(int chunk) override {
    if (inner_.on_device(chunk)) log_.push_back("host " + std::to_string(chunk));
    inner_.ToHost(chunk);
  }
  std::shared_ptr<CopyTicket> SendToHost(int chunk) override {
    if (inner_.on_device(chunk)) log_.push_back("host " + std::to_string(chunk));
    return inner_.SendToHost(chunk);
  }
  void ToDevice(int chunk) override {
    if (!inner_.on_device(chunk)) log_.push_back("device " + std::to_string(chunk));
    inner_.ToDevice(chunk);
  }
  bool ReturnToDeviceIfRoom(int chunk) override {
    const bool was = inner_.on_device(chunk);
    const bool back = inner_.ReturnToDeviceIfRoom(chunk);
    if (!was) log_.push_back((back ? "back " : "stays ") + std::to_string(chunk));
    return back;
  }
  void Pin(int chunk) override {
    log_.push_back("pin " + std::to_string(chunk));
    inner_.Pin(chunk);
  }
  void Unpin(int chunk) override {
    log_.push_back("unpin " + std::to_string(chunk));
    inner_.Unpin(chunk);
  }
  at::Tensor TryBorrowHost(int64_t numel, at::ScalarType dtype) override { return inner_.TryBorrowHost(numel, dtype); }
  void GiveBackHost(at::Tensor& buffer) override { inner_.GiveBackHost(buffer); }
  std::shared_ptr<CopyTicket> WriteCompute(int chunk, int64_t offset_numel, const at::Tensor& values) override {
    log_.push_back("write " + std::to_string(chunk) + " " + std::to_string(offset_numel) + "+" +
                   std::to_string(values.numel()));
    return inner_.WriteCompute(chunk, offset_numel, values);
  }
  void Wait(CopyTicket& ticket) override { inner_.Wait(ticket); }

 private:
  OptimizerMoves& inner_;
  std::vector<std::string>& log_;
};

// `chunks` compute chunks of `dtype`, chunk c filled with c, those in `on_device` on the
// device; a device budget of `device_chunks` chunks; a host budget of `host_bytes`
// beyond the chunks themselves.
struct Fixture {
  std::unique_ptr<CopyEngine> engine;  // before the store: outlives its copies
  std::unique_ptr<ChunkStore> store;
  std::vector<int> ids;
  std::unique_ptr<Residency> residency;
  std::unique_ptr<ResidencyMoves> residency_moves;
  std::vector<std::string> log;
  std::unique_ptr<RecordedMoves> moves;

  Fixture(int chunks, const std::vector<int>& on_device, int device_chunks, at::ScalarType dtype = at::kFloat,
          bool async = false, int64_t host_bytes = int64_t{1} << 24) {
    const int64_t chunk_bytes = kChunkNumel * static_cast<int64_t>(c10::elementSize(dtype));
    store = std::make_unique<ChunkStore>(MakeHostAllocator(false), MakeDeviceAllocator(at::kCPU),
                                         chunks * chunk_bytes + host_bytes, device_chunks * chunk_bytes);
    if (async) {
      engine = MakeThreadCopyEngine();
      store->set_copy_engine(engine.get());
    }
    for (int c = 0; c < chunks; ++c) {
      ids.push_back(store->Add(kChunkNumel, dtype));
      store->Allocate(ids.back(), Tier::kHost);
      store->payload(ids.back()).fill_(c);
    }
    ResidencySettings settings;
    settings.prefetch_depth = 0;
    residency = std::make_unique<Residency>(*store, ids, std::vector<bool>{}, settings);
    for (int c : on_device) residency->Place(c, Tier::kDevice);
    residency_moves = std::make_unique<ResidencyMoves>(*store, *residency, ids);
    moves = std::make_unique<RecordedMoves>(*residency_moves, log);
  }
  HostPipelineSettings Settings(bool device_unreadable, bool compute_write_only = false,
                                int64_t staging_numel = kChunkNumel) const {
    HostPipelineSettings s;
    s.device_unreadable = device_unreadable;
    s.compute_write_only = compute_write_only;
    s.compute_dtype = store->dtype(ids[0]);
    s.staging_numel = staging_numel;
    return s;
  }
  const at::Tensor& Payload(int chunk) const { return store->payload(ids[chunk]); }
  bool OnDevice(int chunk) const { return residency->on_device(chunk); }
};

// Updates that add 1 to every element of a chunk's compute payload (in host memory), run
// when the pipeline says so.
struct AddOne {
  Fixture& f;
  std::vector<int> queued;
  HostPipeline::AddUpdate Add() {
    return [this](int chunk, const at::Tensor* staging) {
      REQUIRE(staging == nullptr);
      REQUIRE(f.store->tier(f.ids[chunk]) == Tier::kHost);
      f.log.push_back("update " + std::to_string(chunk));
      queued.push_back(chunk);
      return std::vector<ElementRange>{{0, kChunkNumel}};
    };
  }
  HostPipeline::RunUpdates Run() {
    return [this] {
      f.log.push_back("run");
      for (int c : queued) f.Payload(c).add_(1);
      queued.clear();
    };
  }
};

TEST_CASE("moved chunks: k+1 on its way to the host before k's update runs, k back after it", "[host_pipeline]") {
  for (bool async : {false, true}) {
    INFO((async ? "async copies" : "synchronous copies"));
    Fixture f(3, {0, 1, 2}, 3, at::kFloat, async);
    HostPipeline pipeline(*f.moves, f.Settings(/*device_unreadable=*/true));
    AddOne updates{f, {}};
    pipeline.Run({0, 1, 2}, updates.Add(), updates.Run());
    const std::vector<std::string> expected = {"host 0", "host 1",   "update 0", "run",    "back 0",
                                               "host 2", "update 1", "run",      "back 1", "update 2",
                                               "run",    "back 2",   "run"};
    CHECK(f.log == expected);
    for (int c = 0; c < 3; ++c) {
      INFO("chunk " << c);
      CHECK(f.OnDevice(c));
      CHECK(at::equal(f.Payload(c), at::full({kChunkNumel}, c + 1.0f)));  // updated on the host, carried back
    }
  }
}

TEST_CASE("a chunk returns to the device only when it fits without evicting", "[host_pipeline]") {
  // Two chunks fit. While chunk 0 updates, chunks 2 and 3 take the room 0 and 1 left;
  // while chunk 1 updates, chunk 3 leaves again: 0 stays on the host, 1 goes back.
  Fixture f(4, {0, 1}, 2);
  HostPipeline pipeline(*f.moves, f.Settings(/*device_unreadable=*/true));
  AddOne updates{f, {}};
  int runs = 0;
  const HostPipeline::RunUpdates run = updates.Run();
  pipeline.Run({0, 1}, updates.Add(), [&] {
    run();
    if (runs == 0) {
      f.residency->Place(2, Tier::kDevice);
      f.residency->Place(3, Tier::kDevice);
    } else if (runs == 1) {
      f.residency->Place(3, Tier::kHost);
    }
    ++runs;
  });
  // Device-to-host moves: 0 and 1 by the pipeline, 3 by the script; none for a return.
  CHECK(f.residency->stats().evictions == 3);
  CHECK_FALSE(f.OnDevice(0));
  CHECK(f.OnDevice(1));
  CHECK(f.OnDevice(2));
  CHECK(std::find(f.log.begin(), f.log.end(), "stays 0") != f.log.end());
  CHECK(std::find(f.log.begin(), f.log.end(), "back 1") != f.log.end());
  CHECK(at::equal(f.Payload(0), at::full({kChunkNumel}, 1.0f)));
  CHECK(at::equal(f.Payload(1), at::full({kChunkNumel}, 2.0f)));
}

// Staged updates write `value` into ranges [0, 16), [16, 48) (adjacent) and [64, 96) of
// the staging buffer; [48, 64) is a parameter not updated.
std::vector<ElementRange> WriteStagedRanges(const at::Tensor* staging, float value) {
  const std::vector<ElementRange> written = {{0, 16}, {16, 32}, {64, 32}};
  for (const ElementRange& r : written) staging->narrow(0, r.offset_numel, r.numel).fill_(value);
  return written;
}

TEST_CASE("staged: a device chunk that only receives parameters stays; written ranges copied in", "[host_pipeline]") {
  for (bool async : {false, true}) {
    INFO((async ? "async copies" : "synchronous copies"));
    Fixture f(2, {0, 1}, 2, at::kBFloat16, async);
    HostPipeline pipeline(*f.moves, f.Settings(/*device_unreadable=*/true, /*compute_write_only=*/true));
    const StoreStats before = f.store->stats();
    std::vector<const at::Tensor*> buffers;
    pipeline.Run(
        {0, 1},
        [&](int chunk, const at::Tensor* staging) {
          REQUIRE(staging != nullptr);
          buffers.push_back(staging);
          return WriteStagedRanges(staging, 10.0f + chunk);
        },
        [] {});
    CHECK(buffers[0] != buffers[1]);  // alternating: chunk 0's copy may still read its buffer
    const std::vector<std::string> expected = {"write 0 0+48", "write 0 64+32", "write 1 0+48", "write 1 64+32"};
    CHECK(f.log == expected);
    CHECK(f.store->stats().d2h_copies == before.d2h_copies);  // nothing came to the host
    CHECK(f.store->stats().h2d_copies - before.h2d_copies == 4);
    CHECK(f.store->stats().host_bytes == before.host_bytes);  // the buffers were given back
    for (int c = 0; c < 2; ++c) {
      INFO("chunk " << c);
      CHECK(f.OnDevice(c));
      const at::Tensor p = f.Payload(c).to(at::kFloat);
      CHECK(at::equal(p.narrow(0, 0, 48), at::full({48}, 10.0f + c)));
      CHECK(at::equal(p.narrow(0, 48, 16), at::full({16}, static_cast<float>(c))));  // not written: stands
      CHECK(at::equal(p.narrow(0, 64, 32), at::full({32}, 10.0f + c)));
      CHECK(at::equal(p.narrow(0, 96, kChunkNumel - 96), at::full({kChunkNumel - 96}, static_cast<float>(c))));
    }
  }
}

TEST_CASE("staged: without host room for both buffers the chunks move instead", "[host_pipeline]") {
  // Staging buffers of a larger chunk elsewhere in the layout (two chunks' room each):
  // the host tier holds both chunks and a half more, so it lends one buffer, not two.
  Fixture f(2, {0, 1}, 2, at::kBFloat16, /*async=*/false, /*host_bytes=*/kChunkNumel * 2);
  HostPipeline pipeline(*f.moves, f.Settings(/*device_unreadable=*/true, /*compute_write_only=*/true,
                                             /*staging_numel=*/2 * kChunkNumel));
  AddOne updates{f, {}};
  const StoreStats before = f.store->stats();
  pipeline.Run({0, 1}, updates.Add(), updates.Run());
  const std::vector<std::string> expected = {"host 0", "host 1", "update 0", "run", "back 0",
                                             "update 1", "run",  "back 1",   "run"};
  CHECK(f.log == expected);
  CHECK(f.store->stats().host_bytes == before.host_bytes);
}

TEST_CASE("chunks the kernels read where they are: nothing moves, one run at the end", "[host_pipeline]") {
  Fixture f(3, {1}, 3);
  HostPipeline pipeline(*f.moves, f.Settings(/*device_unreadable=*/false));
  std::vector<int> queued;
  pipeline.Run(
      {0, 1, 2},
      [&](int chunk, const at::Tensor* staging) {
        REQUIRE(staging == nullptr);
        f.log.push_back("update " + std::to_string(chunk));
        return std::vector<ElementRange>{};
      },
      [&] { f.log.push_back("run"); });
  const std::vector<std::string> expected = {"update 0", "update 1", "update 2", "run"};
  CHECK(f.log == expected);
  CHECK(f.OnDevice(1));
  CHECK(pipeline.AccessFor(1) == HostAccess::kInPlace);
}

TEST_CASE("held for an update ahead: brought and pinned, staged left free; unpinned, then returned",
          "[host_pipeline][hold]") {
  Fixture f(3, {0, 1, 2}, 3, at::kFloat, /*async=*/true);
  HostPipeline pipeline(*f.moves, f.Settings(/*device_unreadable=*/true));
  REQUIRE(pipeline.AccessFor(0) == HostAccess::kBring);
  f.residency->Acquire(2);  // a parameter of chunk 2 in use: it cannot come now
  CHECK_FALSE(pipeline.CanHold(2, HostAccess::kBring));
  CHECK(pipeline.CanHold(0, HostAccess::kBring));
  std::shared_ptr<CopyTicket> copy = pipeline.Hold(0, HostAccess::kBring);
  REQUIRE(copy != nullptr);  // the caller's thread waits for it, not this one
  copy->Wait();
  CHECK(at::equal(f.Payload(0), at::full({kChunkNumel}, 0.0f)));
  CHECK(f.residency->pinned(0));
  CHECK_FALSE(f.OnDevice(0));
  CHECK(pipeline.Hold(1, HostAccess::kStaged) == nullptr);
  CHECK_FALSE(f.residency->pinned(1));
  CHECK(f.OnDevice(1));
  pipeline.UnpinHeld();
  CHECK_FALSE(f.residency->pinned(0));
  CHECK_FALSE(f.OnDevice(0));  // unpinned, not yet returned
  pipeline.ReturnHeld();
  CHECK(f.OnDevice(0));
  const std::vector<std::string> expected = {"host 0", "pin 0", "unpin 0", "back 0"};
  CHECK(f.log == expected);
  f.residency->Release(2);
}

TEST_CASE("a chunk pinned by another part is not held for an update ahead", "[host_pipeline][hold]") {
  // Chunk 1 is the input of a ZeRO gather in flight (pinned until the gather is waited
  // for): bringing it to the host would move a pinned chunk, and an update in place
  // would write what the gather reads. Staging touches it only at the step.
  Fixture f(2, {0, 1}, 2);
  HostPipeline pipeline(*f.moves, f.Settings(/*device_unreadable=*/true));
  f.residency->Pin(1);
  CHECK_FALSE(pipeline.CanHold(1, HostAccess::kBring));
  CHECK_FALSE(pipeline.CanHold(1, HostAccess::kInPlace));
  CHECK(pipeline.CanHold(1, HostAccess::kStaged));
  CHECK(pipeline.CanHold(0, HostAccess::kBring));
  f.residency->Unpin(1);
  CHECK(pipeline.CanHold(1, HostAccess::kBring));
  // Held once, it is pinned: it is not held a second time.
  pipeline.Hold(0, HostAccess::kBring);
  CHECK_FALSE(pipeline.CanHold(0, HostAccess::kInPlace));
  pipeline.UnpinHeld();
  pipeline.ReturnHeld();
  const std::vector<std::string> expected = {"host 0", "pin 0", "unpin 0", "back 0"};
  CHECK(f.log == expected);
}

}  // namespace
}  // namespace ps::chunkmem
