// The thread copy engine and ChunkStore::MoveAsync: copies complete in the background,
// the first payload() waits for them, bytes are preserved, and both tensors of a copy
// stay alive until it has run. A gate (the engine's before_copy seam) holds the worker
// back while the test drops its own references, so an engine that let go early is
// caught every time, not only when the copy happens to lose a race.
#include <ATen/ATen.h>

#include <atomic>
#include <functional>
#include <future>
#include <numeric>
#include <vector>

#include "chunkmem/chunk_store.h"
#include "chunkmem/copy_engine.h"
#include "tests/catch.h"

namespace ps::chunkmem {
namespace {

// Holds every copy of an engine made with Hook() until Open(). Opens itself when
// destroyed, so declare it after the engine: it then opens before the engine's
// destructor waits for the queued copies.
class Gate {
 public:
  std::function<void()> Hook() const {
    std::shared_future<void> opened = opened_;
    return [opened] { opened.wait(); };
  }
  void Open() {
    if (!open_) promise_.set_value();
    open_ = true;
  }
  ~Gate() { Open(); }

 private:
  std::promise<void> promise_;
  std::shared_future<void> opened_ = promise_.get_future().share();
  bool open_ = false;
};

// A float tensor over memory the test owns (it outlives every tensor): when the last
// tensor reference dies, `on_free` runs, and the memory stays readable, so a tensor
// dropped too early shows as a flag and as changed bytes, never as a use after free.
at::Tensor Borrowed(std::vector<float>& bytes, std::function<void()> on_free) {
  return at::from_blob(
      bytes.data(), {static_cast<int64_t>(bytes.size())}, [on_free](void*) { on_free(); }, at::kFloat);
}

TEST_CASE("thread engine: both tensors live until the copy has run, then are let go", "[copy]") {
  constexpr int64_t kNumel = 1 << 16;
  std::vector<float> expected(kNumel);
  std::iota(expected.begin(), expected.end(), 0.0f);
  std::vector<float> src_bytes = expected;
  std::vector<float> dst_bytes(kNumel, 0.0f);
  std::atomic<bool> src_freed{false}, dst_freed{false}, dst_complete_when_freed{false};

  std::unique_ptr<CopyEngine> engine;
  Gate gate;
  engine = MakeThreadCopyEngine(gate.Hook());
  std::shared_ptr<CopyTicket> ticket;
  {
    // Freeing the source poisons it: a copy that runs after that copies -1s.
    at::Tensor src = Borrowed(src_bytes, [&] {
      src_freed = true;
      std::fill(src_bytes.begin(), src_bytes.end(), -1.0f);
    });
    at::Tensor dst = Borrowed(dst_bytes, [&] {
      dst_complete_when_freed = dst_bytes == expected;
      dst_freed = true;
    });
    ticket = engine->Start(dst, src);
  }  // the test's references are gone; the copy has not run (gated)
  CHECK_FALSE(src_freed);
  CHECK_FALSE(dst_freed);
  gate.Open();
  ticket->Wait();
  CHECK(dst_bytes == expected);
  // Let go once the copy is done (Wait returns after that), and not before it was.
  CHECK(src_freed);
  CHECK(dst_freed);
  CHECK(dst_complete_when_freed);
}

TEST_CASE("MoveAsync: the old payload's arena range is not reused while its copy waits", "[copy]") {
  constexpr int64_t kNumel = 1 << 14;
  constexpr int64_t kBytes = kNumel * 4;
  std::unique_ptr<CopyEngine> engine;
  Gate gate;
  engine = MakeThreadCopyEngine(gate.Hook());
  // Room for exactly two payloads on the device (first fit from the bottom).
  ChunkStore store(MakeHostAllocator(false), MakeArenaAllocator(at::kCPU, 2 * kBytes), 4 * kBytes, 2 * kBytes);
  store.set_copy_engine(engine.get());
  const at::Tensor values = at::arange(kNumel, at::kFloat);
  const int a = store.Add(kNumel, at::kFloat);
  store.Allocate(a, Tier::kDevice);
  store.payload(a).copy_(values);
  store.MoveAsync(a, Tier::kHost);  // gated: only the engine holds a's device range now
  const int b = store.Add(kNumel, at::kFloat);
  // Accounting already says a left, so b fits; were a's range back in the free list,
  // b would take it (first fit) and zero it before a's copy read it.
  store.Allocate(b, Tier::kDevice);
  gate.Open();
  CHECK(at::equal(store.payload(a), values));
  CHECK(store.payload(b).eq(0).all().item<bool>());
}

TEST_CASE("MoveAsync: the first payload() waits; round trips are bitwise", "[copy]") {
  auto engine = MakeThreadCopyEngine();
  ChunkStore store(MakeHostAllocator(false), MakeDeviceAllocator(at::kCPU), 1 << 26, 1 << 26);
  store.set_copy_engine(engine.get());
  std::vector<int> ids;
  for (int i = 0; i < 8; ++i) {
    ids.push_back(store.Add(1 << 18, at::kBFloat16));
    store.Allocate(ids.back(), Tier::kHost);
    store.payload(ids.back()).copy_(at::randn({1 << 18}).to(at::kBFloat16) + i);
  }
  std::vector<at::Tensor> before;
  for (int id : ids) before.push_back(store.payload(id).clone());
  for (int id : ids) store.MoveAsync(id, Tier::kDevice);  // all queued at once
  CHECK(store.BytesUsed(Tier::kDevice) == 8 * (1 << 18) * 2);  // accounting is immediate
  for (size_t i = 0; i < ids.size(); ++i) {
    CHECK(store.tier(ids[i]) == Tier::kDevice);
    CHECK(at::equal(store.payload(ids[i]), before[i]));
  }
  for (int id : ids) store.MoveAsync(id, Tier::kHost);
  for (int id : ids) store.Move(id, Tier::kDevice);  // a sync move after an async one waits first
  for (size_t i = 0; i < ids.size(); ++i) CHECK(at::equal(store.payload(ids[i]), before[i]));
}

TEST_CASE("without an engine MoveAsync is Move", "[copy]") {
  ChunkStore store(MakeHostAllocator(false), MakeDeviceAllocator(at::kCPU), 1 << 20, 1 << 20);
  const int id = store.Add(100, at::kFloat);
  store.Allocate(id, Tier::kHost);
  store.MoveAsync(id, Tier::kDevice);
  CHECK(store.tier(id) == Tier::kDevice);
  CHECK(store.payload(id).sum().item<float>() == 0.0f);
}

}  // namespace
}  // namespace ps::chunkmem
