// ZeroGroups against a scripted communicator (one process plays rank 1 of 2; the other
// rank's data is scripted): which chunks this rank owns, what a gather puts where, when
// groups are released, when a group's gradients are reduced, that at most one reduction
// is in flight, and what lands in the owned grad chunk. Four chunks of one 64-element
// parameter each: groups {0, 1} and {2, 3}; this rank owns chunks 1 and 3.
#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <vector>

#include "chunkmem/chunk_store.h"
#include "chunkmem/grad_sink.h"
#include "chunkmem/layout.h"
#include "chunkmem/residency.h"
#include "chunkmem/zero_groups.h"
#include "comm/communicator.h"
#include "tests/catch.h"

namespace ps::chunkmem {
namespace {

constexpr int64_t kNumel = 64;  // one parameter per chunk, capacity 64
constexpr int kRank = 1;
constexpr int kWorld = 2;

// Rank 1 of 2. The other rank's chunk c holds 100 + c; its gradient contribution to a
// reduction is 1000. Every collective is logged; Work records its Wait.
class ScriptedComm final : public comm::Communicator {
 public:
  struct Work final : comm::Work {
    bool waited = false;
    std::function<void()> finish;
    void Wait() override {
      if (!waited && finish) finish();
      waited = true;
    }
  };
  std::vector<std::string> log;
  std::vector<std::shared_ptr<Work>> works;
  int rank() const override { return kRank; }
  int world_size() const override { return kWorld; }
  const char* backend() const override { return "gloo"; }
  comm::WorkPtr AllReduce(at::Tensor, comm::ReduceOp) override { return Done("allreduce"); }
  comm::WorkPtr Broadcast(at::Tensor, int) override { return Done("broadcast"); }
  comm::WorkPtr Barrier() override { return Done("barrier"); }
  comm::WorkPtr AllGather(at::Tensor out, at::Tensor in) override {
    const int64_t n = in.numel();
    const int own = static_cast<int>(in.data_ptr<float>()[0]) / 10;  // an owned chunk c holds 10 * c
    log.push_back("gather " + std::to_string(own / kWorld));
    return Track([out, in, n, own] {
      out.narrow(0, 0, n).fill_(100.0f + own - kRank);  // rank 0's chunk of the group
      out.narrow(0, kRank * n, n).copy_(in);
    });
  }
  comm::WorkPtr ReduceScatter(at::Tensor out, at::Tensor in, comm::ReduceOp op) override {
    REQUIRE(op == comm::ReduceOp::kAvg);
    log.push_back("reduce");
    const int64_t n = out.numel();
    return Track([out, in, n] { out.copy_((in.narrow(0, kRank * n, n) + 1000.0f) / kWorld); });
  }
  int in_flight() const {
    int k = 0;
    for (const auto& w : works) k += w->waited ? 0 : 1;
    return k;
  }

 private:
  comm::WorkPtr Done(const char* what) {
    log.push_back(what);
    return Track(nullptr);
  }
  comm::WorkPtr Track(std::function<void()> finish) {
    auto w = std::make_shared<Work>();
    w->finish = std::move(finish);
    works.push_back(w);
    return w;
  }
};

struct Fixture {
  std::vector<std::vector<int>> used_by = {{0}, {0}, {1}, {1}};  // group 0 in block 0, group 1 in block 1
  ChunkLayout layout;
  std::unique_ptr<ChunkStore> store;
  std::unique_ptr<Residency> residency;
  std::vector<TensorState> states = std::vector<TensorState>(4, TensorState::kHoldAfterFwd);
  std::vector<bool> has_grad = std::vector<bool>(4, false);
  std::vector<std::vector<int64_t>> shapes = std::vector<std::vector<int64_t>>(4, std::vector<int64_t>{kNumel});
  std::unique_ptr<GradSink> sink;
  ScriptedComm comm;
  std::unique_ptr<ZeroGroups> zero;
  std::vector<int> compute_ids, grad_ids;
  std::vector<int> finals;

  explicit Fixture(int64_t prefetch_depth = 0) {
    std::vector<ParamSpec> specs;
    for (int i = 0; i < 4; ++i) specs.push_back({"p" + std::to_string(i), kNumel, used_by[i].front()});
    layout = ChunkLayout::Plan(specs, {kNumel, kWorld, 32});
    REQUIRE(layout.num_chunks() == 4);
    store = std::make_unique<ChunkStore>(MakeHostAllocator(false), MakeDeviceAllocator(at::kCPU), 1 << 24, 1 << 20);
    std::vector<bool> held;
    GradSink::Chunks sink_chunks;
    for (int c = 0; c < 4; ++c) {
      const bool own = c % kWorld == kRank;
      held.push_back(own);
      compute_ids.push_back(store->Add(kNumel, at::kFloat));
      grad_ids.push_back(own ? store->Add(kNumel, at::kFloat) : -1);
      if (own) {
        store->Allocate(compute_ids[c], Tier::kHost);
        store->payload(compute_ids[c]).fill_(10.0f * c);
        store->Allocate(grad_ids[c], Tier::kHost);
      }
      sink_chunks.grad_ids.push_back(grad_ids[c]);
      sink_chunks.adam_m_ids.push_back(-1);
    }
    ResidencySettings settings;
    settings.prefetch_depth = prefetch_depth;
    residency = std::make_unique<Residency>(*store, compute_ids, held, settings);
    sink = std::make_unique<GradSink>(*store, *residency, layout, sink_chunks, shapes, used_by, states, false,
                                      [](int) {});
    ZeroGroups::Chunks chunks;
    chunks.compute_ids = compute_ids;
    chunks.grad_ids = grad_ids;
    zero = std::make_unique<ZeroGroups>(comm, *store, *residency, *sink, layout, chunks, shapes, used_by, has_grad,
                                        [this](int chunk) { finals.push_back(chunk); });
  }
  void Grad(int index, float value) {
    zero->AddGrad(index, at::full({kNumel}, value));
    has_grad[index] = true;
    zero->ReduceIfComplete(index);  // parameter i is chunk i
  }
};

TEST_CASE("ZeRO ownership and gathers: this rank's chunk is its slot, the other's is gathered", "[zero_groups]") {
  Fixture f;
  CHECK(f.zero->owned(1));
  CHECK(f.zero->owned(3));
  CHECK_FALSE(f.zero->owned(0));
  CHECK_THROWS_WITH(f.zero->RemotePayload(0), Catch::Contains("not gathered"));
  f.residency->BeginMoment("forward", 0);
  f.zero->EnsureGathered(0);
  f.zero->EnsureGathered(1);  // the same group: no second gather
  CHECK(f.comm.log == std::vector<std::string>{"gather 0"});
  CHECK(f.residency->on_device(1));  // the gather's input came to the device
  CHECK(at::equal(f.zero->RemotePayload(0), at::full({kNumel}, 100.0f)));
  CHECK(f.zero->stats().comm_bytes == kNumel * 4 * kWorld / kWorld);
  // Block 1 starts: group 0 is idle (nothing in use) and released; group 1 is gathered.
  f.residency->BeginMoment("forward", 1);
  f.zero->ReleaseIdle(1);
  CHECK_THROWS(f.zero->RemotePayload(0));
  f.zero->EnsureGathered(2);
  CHECK(at::equal(f.zero->RemotePayload(2), at::full({kNumel}, 102.0f)));
  // A group with a chunk in use stays.
  f.residency->Acquire(2);
  f.zero->ReleaseIdle(-1);
  CHECK_NOTHROW(f.zero->RemotePayload(2));
  f.residency->Release(2);
  f.zero->ReleaseIdle(-1);
  CHECK_THROWS(f.zero->RemotePayload(2));
  CHECK(f.zero->stats().group_gathers == 2);
}

TEST_CASE("ZeRO reductions: a group reduces once its gradients are in, one in flight, averaged into the owned chunk",
          "[zero_groups]") {
  Fixture f;
  f.sink->BeginStep(false);
  f.Grad(3, 4.0f);  // group 1: chunk 2 still missing
  CHECK(f.comm.log.empty());
  f.Grad(2, 2.0f);  // group 1 complete: reduction started, left in flight
  CHECK(f.comm.log == std::vector<std::string>{"reduce"});
  CHECK(f.comm.in_flight() == 1);
  CHECK(f.finals.empty());
  f.Grad(1, 6.0f);
  f.Grad(0, 8.0f);  // group 0 complete: group 1's reduction finished first
  CHECK(f.comm.log == std::vector<std::string>{"reduce", "reduce"});
  CHECK(f.finals == std::vector<int>{3});
  CHECK(f.comm.in_flight() == 1);
  f.zero->FinishBackward();
  CHECK(f.comm.in_flight() == 0);
  CHECK(f.finals == std::vector<int>{3, 1});
  // Owned chunk c holds (this rank's gradient + the other rank's 1000) / 2.
  CHECK(at::equal(f.store->payload(f.grad_ids[3]), at::full({kNumel}, (4.0f + 1000.0f) / 2)));
  CHECK(at::equal(f.store->payload(f.grad_ids[1]), at::full({kNumel}, (6.0f + 1000.0f) / 2)));
  CHECK(f.zero->stats().group_reductions == 2);
  CHECK(f.store->BytesUsed(Tier::kDevice) == 0);  // the group buffers were given back
}

TEST_CASE("ZeRO after warm-up: the next moment's group is gathered ahead, its input pinned until used",
          "[zero_groups][prefetch]") {
  Fixture f(/*prefetch_depth=*/1);
  for (int it = 0; it < 2; ++it) {  // the first traces; both gather on use
    for (int block : {0, 1}) {
      f.residency->BeginMoment("forward", block);
      f.zero->ReleaseIdle(block);
      for (int c : {2 * block, 2 * block + 1}) {
        f.zero->EnsureGathered(c);
        f.residency->Acquire(c);
      }
      if (it == 1 && block == 0) {
        f.zero->PrefetchNext();  // group 1 (moment 1), ahead
        CHECK(f.zero->stats().group_prefetches == 1);
        CHECK(f.residency->pinned(3));  // the gather's input
        CHECK(f.comm.in_flight() == 1);
      }
      for (int c : {2 * block, 2 * block + 1}) f.residency->Release(c);
    }
    if (it == 1) {
      CHECK_FALSE(f.residency->pinned(3));  // EnsureGathered waited for it
      CHECK(at::equal(f.zero->RemotePayload(2), at::full({kNumel}, 102.0f)));
    }
    f.zero->ReleaseIdle(-1);
    f.residency->EndIteration();
  }
  CHECK(f.zero->stats().group_gathers == 4);
}

TEST_CASE("ZeRO: a second micro-batch of a group being reduced waits for it and accumulates", "[zero_groups]") {
  Fixture f;
  f.sink->BeginStep(false);
  f.Grad(2, 2.0f);
  f.Grad(3, 4.0f);  // reduction of group 1 in flight
  f.sink->FinishBackward();
  f.Grad(3, 8.0f);  // the next micro-batch's gradient of group 1: the reduction finishes first
  CHECK(f.comm.in_flight() == 0);
  f.Grad(2, 2.0f);
  f.zero->FinishBackward();
  CHECK(at::equal(f.store->payload(f.grad_ids[3]), at::full({kNumel}, (4.0f + 1000.0f) / 2 + (8.0f + 1000.0f) / 2)));
}

}  // namespace
}  // namespace ps::chunkmem
