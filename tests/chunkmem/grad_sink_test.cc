// GradSink against scripted gradient arrivals (no model, no autograd): when a staging
// slot is flushed, that the grad chunks hold the sums of what arrived (micro-batches
// added in order), parameters unused in a micro-batch, the host fallback without device
// room, block-major flush timing, the give-way, zeroing and pinning at a step's start,
// and when grads_final is called. Two chunks of two 64-element parameters each.
#include <ATen/ATen.h>

#include <map>
#include <memory>
#include <vector>

#include "chunkmem/chunk_store.h"
#include "chunkmem/grad_sink.h"
#include "chunkmem/layout.h"
#include "chunkmem/residency.h"
#include "tests/catch.h"

namespace ps::chunkmem {
namespace {

constexpr int64_t kParamNumel = 64;
constexpr int64_t kChunkNumel = 128;  // two parameters per chunk
constexpr int64_t kChunkBytes = kChunkNumel * 4;

struct Fixture {
  std::vector<std::vector<int>> used_by;  // [param] blocks
  ChunkLayout layout;
  std::unique_ptr<ChunkStore> store;
  std::unique_ptr<Residency> residency;
  std::vector<TensorState> states;
  std::vector<std::vector<int64_t>> shapes = std::vector<std::vector<int64_t>>(4, std::vector<int64_t>{kParamNumel});
  std::unique_ptr<GradSink> sink;
  std::vector<int> final_calls;  // grads_final's chunks, in order
  GradSink::Chunks chunks;

  // Params 0, 1 in chunk 0; 2, 3 in chunk 1. `device_bytes`: the device budget.
  Fixture(std::vector<std::vector<int>> blocks, int64_t device_bytes, bool block_major = false,
          Tier adam_tier = Tier::kHost)
      : used_by(std::move(blocks)) {
    std::vector<ParamSpec> specs;
    for (int i = 0; i < 4; ++i) specs.push_back({"p" + std::to_string(i), kParamNumel, used_by[i].front()});
    layout = ChunkLayout::Plan(specs, {kChunkNumel, 1, 32});
    REQUIRE(layout.num_chunks() == 2);
    store = std::make_unique<ChunkStore>(MakeHostAllocator(false), MakeDeviceAllocator(at::kCPU), 1 << 24,
                                         device_bytes);
    std::vector<int> compute_ids;
    for (int c = 0; c < 2; ++c) {
      compute_ids.push_back(store->Add(kChunkNumel, at::kFloat));
      store->Allocate(compute_ids.back(), Tier::kHost);
      chunks.grad_ids.push_back(store->Add(kChunkNumel, at::kFloat));
      store->Allocate(chunks.grad_ids.back(), Tier::kHost);
      chunks.adam_m_ids.push_back(store->Add(kChunkNumel, at::kFloat));
      store->Allocate(chunks.adam_m_ids.back(), adam_tier);
    }
    ResidencySettings settings;
    settings.prefetch_depth = 0;
    residency = std::make_unique<Residency>(*store, compute_ids, std::vector<bool>{}, settings);
    states.assign(4, TensorState::kHoldAfterFwd);  // every parameter used in this micro-batch's forward
    sink = std::make_unique<GradSink>(*store, *residency, layout, chunks, shapes, used_by, states, block_major,
                                      [this](int chunk) { final_calls.push_back(chunk); });
    residency->set_give_way([this](const std::function<bool()>& evict) { return sink->GiveWay(evict); });
  }
  // The value parameter `index` gets in micro-batch `mb`.
  static at::Tensor Grad(int index, int mb) { return at::full({kParamNumel}, 1.0f + index + 10.0f * mb); }
  void Arrive(int index, int mb) {
    sink->Add(index, Grad(index, mb));
    sink->FlushIfComplete(layout.placements()[index].chunk_id);
  }
  at::Tensor GradOf(int index) const {
    const auto& pl = layout.placements()[index];
    return store->payload(chunks.grad_ids[pl.chunk_id]).narrow(0, pl.offset_numel, pl.numel);
  }
};

TEST_CASE("a chunk's slot is flushed once every parameter it used has its gradient", "[grad_sink]") {
  Fixture f({{0}, {0}, {1}, {1}}, 4 * kChunkBytes);
  f.sink->BeginStep(false);
  f.Arrive(3, 0);
  CHECK(f.sink->stats().grad_flushes == 0);
  f.Arrive(0, 0);
  CHECK(f.sink->stats().grad_flushes == 0);
  f.Arrive(2, 0);  // chunk 1 complete
  CHECK(f.sink->stats().grad_flushes == 1);
  f.Arrive(1, 0);  // chunk 0 complete
  CHECK(f.sink->stats().grad_flushes == 2);
  f.sink->FinishBackward();
  for (int i = 0; i < 4; ++i) CHECK(at::equal(f.GradOf(i), Fixture::Grad(i, 0)));
  CHECK(f.final_calls.size() == 2);
  CHECK(f.store->BytesUsed(Tier::kDevice) == 0);  // every slot given back
}

TEST_CASE("a parameter unused in the micro-batch does not hold its chunk back", "[grad_sink]") {
  Fixture f({{0}, {0}, {1}, {1}}, 4 * kChunkBytes);
  f.sink->BeginStep(false);
  f.states[3] = TensorState::kHold;  // not used in this forward
  f.Arrive(2, 0);
  CHECK(f.sink->stats().grad_flushes == 1);
  f.sink->FinishBackward();
  CHECK(at::equal(f.GradOf(2), Fixture::Grad(2, 0)));
  CHECK(at::equal(f.GradOf(3), at::zeros({kParamNumel})));
}

TEST_CASE("micro-batches are added into the grad chunk in order; a step zeroes what was written", "[grad_sink]") {
  Fixture f({{0}, {0}, {1}, {1}}, 4 * kChunkBytes);
  f.sink->BeginStep(false);
  for (int mb = 0; mb < 3; ++mb) {
    for (int i : {1, 0, 3, 2}) f.Arrive(i, mb);
    f.sink->FinishBackward();
  }
  for (int i = 0; i < 4; ++i) {
    CHECK(at::equal(f.GradOf(i), Fixture::Grad(i, 0) + Fixture::Grad(i, 1) + Fixture::Grad(i, 2)));
  }
  CHECK(f.sink->stats().grad_flushes == 6);
  f.sink->BeginStep(false);
  for (int i = 0; i < 4; ++i) CHECK(at::equal(f.GradOf(i), at::zeros({kParamNumel})));
}

TEST_CASE("without device room gradients are added one by one", "[grad_sink]") {
  Fixture f({{0}, {0}, {1}, {1}}, /*device_bytes=*/0);
  f.sink->BeginStep(false);
  for (int mb = 0; mb < 2; ++mb) {
    for (int i = 0; i < 4; ++i) f.Arrive(i, mb);
    f.sink->FinishBackward();
  }
  CHECK(f.sink->stats().grad_host_fallbacks == 8);
  CHECK(f.sink->stats().grad_flushes == 0);
  for (int i = 0; i < 4; ++i) CHECK(at::equal(f.GradOf(i), Fixture::Grad(i, 0) + Fixture::Grad(i, 1)));
}

TEST_CASE("block-major: a slot waits until backward is below every block using its chunk", "[grad_sink][vertical]") {
  // Chunk 0 is used by blocks 0 and 2 (a tied embedding), chunk 1 by block 1. Two
  // micro-batches per block, block-major: each block's gradients arrive twice.
  Fixture f({{0, 2}, {0}, {1}, {1}}, 4 * kChunkBytes, /*block_major=*/true);
  f.sink->BeginStep(false);
  f.sink->EnterBackwardBlock(2);
  for (int mb = 0; mb < 2; ++mb) f.sink->Add(0, Fixture::Grad(0, mb));
  f.sink->EnterBackwardBlock(1);
  for (int mb = 0; mb < 2; ++mb) {
    f.sink->Add(2, Fixture::Grad(2, mb));
    f.sink->Add(3, Fixture::Grad(3, mb));
    f.sink->FlushIfComplete(1);  // never flushes block-major
  }
  CHECK(f.sink->stats().grad_flushes == 0);
  f.sink->EnterBackwardBlock(0);  // below block 1: chunk 1 complete; chunk 0 still in use
  CHECK(f.sink->stats().grad_flushes == 1);
  for (int mb = 0; mb < 2; ++mb) f.sink->Add(1, Fixture::Grad(1, mb));
  f.sink->FinishBackward();
  CHECK(f.sink->stats().grad_flushes == 2);
  for (int i = 0; i < 4; ++i) CHECK(at::equal(f.GradOf(i), Fixture::Grad(i, 0) + Fixture::Grad(i, 1)));
  CHECK(f.final_calls == std::vector<int>{1, 0});
}

TEST_CASE("slots give way to a compute chunk that needs the room", "[grad_sink]") {
  // Room for two chunks: both slots open, then chunk 0's compute chunk needs one.
  Fixture f({{0}, {0}, {1}, {1}}, 2 * kChunkBytes);
  f.sink->BeginStep(false);
  f.Arrive(0, 0);
  f.Arrive(2, 0);
  CHECK(f.store->BytesUsed(Tier::kDevice) == 2 * kChunkBytes);
  f.residency->BeginMoment("backward", 0);
  f.residency->Acquire(0);  // only with a slot's partial sum sent to the host
  CHECK(f.residency->on_device(0));
  CHECK(f.sink->stats().grad_flushes == 2);
  f.residency->Release(0);
  f.Arrive(1, 0);
  f.Arrive(3, 0);
  f.sink->FinishBackward();
  for (int i = 0; i < 4; ++i) CHECK(at::equal(f.GradOf(i), Fixture::Grad(i, 0)));
}

TEST_CASE("after warm-up grad chunks whose Adam state is on the device are pinned there", "[grad_sink]") {
  Fixture f({{0}, {0}, {1}, {1}}, 8 * kChunkBytes, false, /*adam_tier=*/Tier::kDevice);
  f.sink->BeginStep(/*warmed_up=*/false);
  CHECK(f.sink->stats().grad_chunks_on_device == 0);
  f.sink->BeginStep(/*warmed_up=*/true);
  CHECK(f.sink->stats().grad_chunks_on_device == 2);
  for (int i = 0; i < 4; ++i) f.Arrive(i, 0);
  CHECK(f.sink->stats().grad_flushes == 0);  // added in place
  f.sink->FinishBackward();
  for (int i = 0; i < 4; ++i) CHECK(at::equal(f.GradOf(i), Fixture::Grad(i, 0)));
}

TEST_CASE("pinning keeps the flush slots when some gradient chunk cannot stay", "[grad_sink]") {
  // Every chunk's Adam state on the device (two chunks' worth), room beside it for one and
  // a half gradient chunks: pinning one would leave the other staging through a slot with
  // no room (its gradients added one by one on the host), so none is pinned and both flush.
  Fixture f({{0}, {0}, {1}, {1}}, 2 * kChunkBytes + 3 * kChunkBytes / 2, false, /*adam_tier=*/Tier::kDevice);
  f.sink->BeginStep(/*warmed_up=*/true);
  CHECK(f.sink->stats().grad_chunks_on_device == 0);
  for (int i = 0; i < 4; ++i) f.Arrive(i, 0);
  f.sink->FinishBackward();
  CHECK(f.sink->stats().grad_flushes == 2);
  CHECK(f.sink->stats().grad_host_fallbacks == 0);
  for (int i = 0; i < 4; ++i) CHECK(at::equal(f.GradOf(i), Fixture::Grad(i, 0)));
}

}  // namespace
}  // namespace ps::chunkmem
