// The thread copy engine and ChunkStore::MoveAsync: copies complete in the background,
// the first payload() waits for them, bytes are preserved, and the source stays alive
// until the copy is done.
#include <ATen/ATen.h>

#include "chunkmem/chunk_store.h"
#include "chunkmem/copy_engine.h"
#include "tests/catch.h"

namespace ps::chunkmem {
namespace {

TEST_CASE("thread engine: Wait returns after the copy, source kept alive meanwhile", "[copy]") {
  auto engine = MakeThreadCopyEngine();
  at::Tensor dst = at::empty({1 << 20});
  std::shared_ptr<CopyTicket> ticket;
  {
    at::Tensor src = at::arange(1 << 20, at::kFloat);
    ticket = engine->Start(dst, src);
  }  // our reference to src is gone; the engine holds it
  ticket->Wait();
  CHECK(at::equal(dst, at::arange(1 << 20, at::kFloat)));
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
