// Gradient accumulation through the chunk runtime on the simulated device tier
// (docs/chunkmem.md, "Gradients"): with 4 micro-batches and 64 small parameters per
// chunk, device-to-host copies and host waits per step are a small constant per chunk
// and micro-batch, not per parameter (the per-parameter path made 4 x 192 of each), and
// the accumulated gradients are plain autograd's, bitwise: with device staging slots,
// with asynchronous copies on a worker thread, and in the fallback when the device
// budget has no room for a slot.
#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "chunkmem/copy_engine.h"
#include "chunkmem/pre_backward.h"
#include "chunkmem/runtime.h"
#include "tests/catch.h"

namespace ps::chunkmem {
namespace {

constexpr int kBlocks = 3;
constexpr int kParamsPerBlock = 64;
constexpr int kMicroBatches = 4;
constexpr int kChunkNumel = kParamsPerBlock * 32;  // each [8] parameter takes an aligned 32-element slot

struct ManySmall {
  std::vector<std::vector<at::Tensor>> blocks;  // [block][param] -> [8]
  at::Tensor coeffs = at::linspace(0.5, 1.5, kParamsPerBlock).unsqueeze(1);  // [64, 1]: distinct gradients
  ManySmall() {
    for (int b = 0; b < kBlocks; ++b) {
      blocks.emplace_back();
      for (int j = 0; j < kParamsPerBlock; ++j) blocks[b].push_back((0.1 * at::randn({8})).requires_grad_());
    }
  }
  ManySmall Copy() const {  // an explicit deep copy: another set of leaves with the same values
    ManySmall m;
    for (int b = 0; b < kBlocks; ++b) {
      for (int j = 0; j < kParamsPerBlock; ++j) m.blocks[b][j] = blocks[b][j].detach().clone().requires_grad_();
    }
    return m;
  }
};

// `rt` null: plain autograd.
at::Tensor Loss(ManySmall& m, const at::Tensor& x, ChunkRuntime* rt) {
  at::Tensor h = x;  // [4, 8]
  for (int b = 0; b < kBlocks; ++b) {
    if (rt) rt->PreForward(b);
    const at::Tensor w = (at::stack(m.blocks[b]) * m.coeffs).sum(0);  // [8]
    at::Tensor out = at::tanh(h * w + 0.1 * at::stack(m.blocks[b]).pow(2).sum(0));
    if (rt) {
      rt->PostForward(b);
      out = WrapForPreBackward(out, b, *rt);
    }
    h = out;
  }
  return h.pow(2).sum();
}

struct StepCounts {
  int64_t d2h_copies = 0, syncs = 0, flushes = 0, fallbacks = 0;
};

// Two optimizer steps of kMicroBatches micro-batches each (the first is the warm-up);
// returns the second step's counts and checks the grad chunks against plain autograd.
StepCounts RunSteps(int64_t device_budget_bytes, bool async_copies) {
  at::manual_seed(3);
  ManySmall plain;
  ManySmall chunked = plain.Copy();
  std::vector<at::Tensor> xs;
  for (int k = 0; k < kMicroBatches; ++k) xs.push_back(at::randn({4, 8}));

  ChunkStore store(MakeHostAllocator(false), MakeDeviceAllocator(at::kCPU), 1 << 26, device_budget_bytes);
  std::unique_ptr<CopyEngine> engine = async_copies ? MakeThreadCopyEngine() : nullptr;
  store.set_copy_engine(engine.get());
  std::vector<ManagedParam> managed;
  for (int b = 0; b < kBlocks; ++b) {
    for (int j = 0; j < kParamsPerBlock; ++j) {
      managed.push_back({"b" + std::to_string(b) + "." + std::to_string(j), chunked.blocks[b][j], {b}});
    }
  }
  RuntimeOptions options;
  options.chunk_numel = kChunkNumel;
  options.compute_dtype = at::kFloat;
  ChunkRuntime rt(managed, store, options);
  REQUIRE(rt.layout().num_chunks() == kBlocks);

  StepCounts counts;
  for (int step = 0; step < 2; ++step) {
    const StoreStats before = store.stats();
    const RuntimeStats rs_before = rt.stats();
    rt.ZeroGrads();
    for (const auto& x : xs) {
      Loss(chunked, x, &rt).backward();
      rt.AfterBackward();
    }
    counts = {store.stats().d2h_copies - before.d2h_copies, store.stats().syncs - before.syncs,
              rt.stats().grad_flushes - rs_before.grad_flushes,
              rt.stats().grad_host_fallbacks - rs_before.grad_host_fallbacks};
    // Plain autograd accumulates the same micro-batches into .grad.
    for (auto& block : plain.blocks) {
      for (auto& p : block) p.mutable_grad() = at::Tensor();
    }
    for (const auto& x : xs) Loss(plain, x, nullptr).backward();
    for (int i = 0; i < static_cast<int>(managed.size()); ++i) {
      INFO("step " << step << ", parameter " << managed[i].name);
      CHECK(at::equal(rt.View(ChunkKind::kGrad, i), plain.blocks[i / kParamsPerBlock][i % kParamsPerBlock].grad()));
    }
    rt.EndIteration();
  }
  return counts;
}

TEST_CASE("accumulation: copies and waits per step are per chunk, not per parameter", "[runtime][grads]") {
  const int64_t params = kBlocks * kParamsPerBlock;
  const int64_t per_chunk_bound = 2 * kMicroBatches * kBlocks;  // one copy (and wait) per chunk and micro-batch, x2
  for (bool async_copies : {false, true}) {
    INFO("asynchronous copies " << async_copies);
    // Room for every compute chunk and the staging slots: nothing is evicted.
    const StepCounts c = RunSteps(/*device_budget_bytes=*/1 << 24, async_copies);
    INFO("per step: " << c.d2h_copies << " device-to-host copies, " << c.syncs << " waits, " << c.flushes
                      << " flushes, " << c.fallbacks << " per-parameter copies (" << params << " parameters x "
                      << kMicroBatches << " micro-batches)");
    CHECK(c.fallbacks == 0);
    CHECK(c.flushes == kMicroBatches * kBlocks);  // each chunk once per micro-batch
    CHECK(c.d2h_copies <= per_chunk_bound);
    CHECK(c.syncs <= per_chunk_bound);
    CHECK(per_chunk_bound * 4 < params * kMicroBatches);  // the bound tells the two paths apart
  }
}

TEST_CASE("accumulation under a tight device budget: evicts for the slots, or falls back per parameter", "[runtime][grads]") {
  const int64_t chunk_bytes = kChunkNumel * 4;
  // Two chunks: a block's compute chunk plus its staging slot, made room for by
  // evicting idle compute chunks. Copies stay per chunk (evictions included).
  const StepCounts two = RunSteps(2 * chunk_bytes, /*async_copies=*/false);
  CHECK(two.fallbacks == 0);
  CHECK(two.d2h_copies <= 2 * kMicroBatches * kBlocks + 2 * kMicroBatches * kBlocks);  // flushes + evictions
  // One chunk: the block's compute chunk in use fills the device; no slot fits, so each
  // gradient is copied alone (the old path), and the sums are still exact.
  const StepCounts one = RunSteps(chunk_bytes, /*async_copies=*/false);
  CHECK(one.fallbacks == kBlocks * kParamsPerBlock * kMicroBatches);
  CHECK(one.flushes == 0);
}

}  // namespace
}  // namespace ps::chunkmem
