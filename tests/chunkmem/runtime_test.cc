// ChunkRuntime on a three-block toy: a parameter shared by blocks 0 and 2 (like GPT's
// tied embedding), a parameter its block never uses, parameter binding (invariant 4),
// states through an iteration, and gradients equal to plain autograd's; the host
// memory peak while the runtime takes the model's parameters.
#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "chunkmem/memory_probe.h"
#include "chunkmem/pre_backward.h"
#include "chunkmem/runtime.h"
#include "tests/catch.h"

namespace ps::chunkmem {
namespace {

// The options these tests vary, by name (RuntimeOptions has more fields).
RuntimeOptions Options(int64_t chunk_numel, at::ScalarType dtype, EvictionPolicyKind eviction, int64_t warmup_steps) {
  RuntimeOptions o;
  o.chunk_numel = chunk_numel;
  o.compute_dtype = dtype;
  o.residency.eviction = eviction;
  o.residency.warmup_steps = warmup_steps;
  return o;
}

struct Toy {
  at::Tensor shared = at::randn({8, 8}).requires_grad_();  // blocks 0 and 2
  at::Tensor unused = at::randn({8}).requires_grad_();     // block 1, never touched
  at::Tensor middle = at::randn({8, 8}).requires_grad_();  // block 1
  at::Tensor tail = at::randn({8}).requires_grad_();       // block 3
};

// Runs the toy forward; `rt` may be null (plain autograd).
at::Tensor Forward(Toy& m, const at::Tensor& x, ChunkRuntime* rt) {
  auto block = [&](int id, auto body, at::Tensor in) {
    if (rt) rt->PreForward(id);
    at::Tensor out = body(in);
    if (rt) {
      rt->PostForward(id);
      out = WrapForPreBackward(out, id, *rt);
    }
    return out;
  };
  at::Tensor y = block(0, [&](at::Tensor in) { return at::tanh(in.matmul(m.shared)); }, x);
  y = block(1, [&](at::Tensor in) { return at::tanh(in.matmul(m.middle)); }, y);
  y = block(2, [&](at::Tensor in) { return in.matmul(m.shared.t()); }, y);
  y = block(3, [&](at::Tensor in) { return in * m.tail; }, y);
  return y.pow(2).sum();
}

std::unique_ptr<ChunkStore> Store(int64_t device_budget) {
  return std::make_unique<ChunkStore>(MakeHostAllocator(false), MakeDeviceAllocator(at::kCPU), 1 << 24,
                                      device_budget);
}

TEST_CASE("taking the parameters: host memory peaks near the chunks, not chunks plus model", "[runtime][init]") {
  // 8 parameters of 10,000 fp32 elements, two per block and chunk (20,480 elements with
  // the alignment): 4 chunks, each with compute (= master in fp32), grad, m and v payloads.
  // The probe counts every CPU allocation made on this thread from here on, and its
  // free, the parameters' and the chunk payloads' (it is not attached to the store).
  const auto probe = MakeCpuMemoryProbe();
  std::vector<ManagedParam> managed;
  for (int i = 0; i < 8; ++i) {
    managed.push_back({"p" + std::to_string(i), at::randn({100, 100}).requires_grad_(), {i / 2}});
  }
  const int64_t param_bytes = 8 * 10000 * 4;
  auto store = Store(1 << 24);
  RuntimeOptions o;
  o.chunk_numel = 20480;
  ChunkRuntime rt(managed, *store, o);
  const int64_t peak = probe->TakePeakNonModelBytes();
  int64_t chunk_bytes = 0;
  for (int id = 0; id < store->num_chunks(); ++id) chunk_bytes += store->chunk_bytes(id);
  REQUIRE(rt.layout().num_chunks() == 4);
  INFO("peak " << peak << ", chunk bytes " << chunk_bytes << ", parameter bytes " << param_bytes);
  // Each chunk's parameters are released before the next chunk is allocated: the peak
  // is the model plus the chunks minus all but the last chunk's parameters. Allocating
  // every chunk first would peak at the model plus all the chunks.
  CHECK(peak <= chunk_bytes + param_bytes / 4 + 4096);
  CHECK(peak >= chunk_bytes);  // the probe saw the chunks
  for (const auto& p : managed) CHECK(p.tensor.numel() == 0);  // storage handed over
}

TEST_CASE("tied and unused parameters: gradients as plain autograd, states as documented", "[runtime]") {
  at::manual_seed(0);
  Toy plain;
  Toy chunked;
  {
    at::NoGradGuard g;
    chunked.shared.copy_(plain.shared);
    chunked.unused.copy_(plain.unused);
    chunked.middle.copy_(plain.middle);
    chunked.tail.copy_(plain.tail);
  }
  const at::Tensor x = at::randn({3, 8});
  Forward(plain, x, nullptr).backward();

  // One parameter per chunk (chunks of 64 elements) and room for three of the four on the
  // device: block 1's backward needs its two chunks plus the shared one, which stays in
  // use until its last gradient arrives (block 0's backward).
  auto store = Store(3 * 64 * 4);
  ChunkRuntime rt({{"shared", chunked.shared, {0, 2}},
                   {"unused", chunked.unused, {1}},
                   {"middle", chunked.middle, {1}},
                   {"tail", chunked.tail, {3}}},
                  *store, Options(64, at::kFloat, EvictionPolicyKind::kLru, 1));
  REQUIRE(rt.layout().num_chunks() == 4);
  CHECK(chunked.shared.numel() == 0);  // released to the chunks
  CHECK(rt.state(0) == TensorState::kHold);

  rt.ZeroGrads();
  const at::Tensor loss = Forward(chunked, x, &rt);
  CHECK(rt.state(0) == TensorState::kHoldAfterFwd);
  CHECK(rt.state(1) == TensorState::kHoldAfterFwd);
  CHECK(chunked.middle.numel() == 0);
  loss.backward();
  rt.AfterBackward();

  CHECK(rt.has_grad(0));
  CHECK(rt.has_grad(2));
  CHECK_FALSE(rt.has_grad(1));  // never used in forward: no gradient, no update later
  CHECK(rt.state(0) == TensorState::kHoldAfterBwd);
  CHECK(rt.state(1) == TensorState::kHoldAfterBwd);
  CHECK(at::allclose(rt.View(ChunkKind::kGrad, 0), plain.shared.grad(), 1e-6, 1e-6));  // both uses summed
  CHECK(at::allclose(rt.View(ChunkKind::kGrad, 2), plain.middle.grad(), 1e-6, 1e-6));
  CHECK(at::allclose(rt.View(ChunkKind::kGrad, 3), plain.tail.grad(), 1e-6, 1e-6));
  CHECK(at::equal(rt.View(ChunkKind::kGrad, 1), at::zeros({8})));
  CHECK_FALSE(chunked.shared.grad().defined());  // the temporary gradient was taken
  CHECK(store->stats().peak_device_bytes <= 3 * 64 * 4);
  CHECK(rt.stats().evictions > 0);

  rt.EndIteration();
  for (int i = 0; i < 4; ++i) CHECK(rt.state(i) == TensorState::kHold);
}

TEST_CASE("the model gets its values back when the runtime ends, unless told not to", "[runtime]") {
  at::Tensor w = at::randn({5, 7}).requires_grad_();
  const at::Tensor original = w.detach().clone();
  {
    auto store = Store(1 << 20);
    ChunkRuntime rt({{"w", w, {0}}}, *store, Options(64, at::kFloat, EvictionPolicyKind::kOpt, 1));
    CHECK(w.numel() == 0);
    rt.PreForward(0);
    CHECK(w.data_ptr() == rt.View(ChunkKind::kCompute, 0).data_ptr());  // bound to the chunk slot
    CHECK(at::equal(w, original));
    rt.PostForward(0);
  }
  CHECK(at::equal(w, original));
  // keep_values_at_exit false (the trainer's): no copy of the model at exit.
  at::Tensor v = at::randn({5, 7}).requires_grad_();
  {
    auto store = Store(1 << 20);
    RuntimeOptions o = Options(64, at::kFloat, EvictionPolicyKind::kOpt, 1);
    o.keep_values_at_exit = false;
    ChunkRuntime rt({{"v", v, {0}}}, *store, o);
  }
  CHECK(v.numel() == 0);
}

TEST_CASE("gradients reuse the bf16 compute slots at the last backward use", "[runtime][reuse]") {
  at::manual_seed(1);
  Toy plain;
  Toy chunked;
  {
    at::NoGradGuard g;
    for (auto* pair : {&plain.shared, &plain.unused, &plain.middle, &plain.tail}) pair->copy_(pair->to(at::kBFloat16));
    chunked.shared.copy_(plain.shared);
    chunked.unused.copy_(plain.unused);
    chunked.middle.copy_(plain.middle);
    chunked.tail.copy_(plain.tail);
  }
  auto store = Store(1 << 20);
  RuntimeOptions options = Options(64, at::kBFloat16, EvictionPolicyKind::kOpt, 1);
  options.grads_in_compute_chunks = true;
  ChunkRuntime rt({{"shared", chunked.shared, {0, 2}},
                   {"unused", chunked.unused, {1}},
                   {"middle", chunked.middle, {1}},
                   {"tail", chunked.tail, {3}}},
                  *store, options);
  CHECK(rt.chunk_id(ChunkKind::kGrad, 0) == rt.chunk_id(ChunkKind::kCompute, 0));  // no grad chunks
  CHECK(store->num_chunks() == 4 * 4);  // compute, master, m, v per layout chunk
  const at::Tensor x = at::randn({3, 8});
  rt.ZeroGrads();
  Forward(chunked, x.to(at::kBFloat16), &rt).backward();
  rt.AfterBackward();
  // Plain bf16 autograd on the same bf16 values.
  Toy ref;
  {
    at::NoGradGuard g;
    ref.shared = plain.shared.detach().to(at::kBFloat16).requires_grad_();
    ref.unused = plain.unused.detach().to(at::kBFloat16).requires_grad_();
    ref.middle = plain.middle.detach().to(at::kBFloat16).requires_grad_();
    ref.tail = plain.tail.detach().to(at::kBFloat16).requires_grad_();
  }
  Forward(ref, x.to(at::kBFloat16), nullptr).backward();
  CHECK(at::equal(rt.View(ChunkKind::kCompute, 0), ref.shared.grad()));  // the slot now holds the gradient
  CHECK(at::equal(rt.View(ChunkKind::kCompute, 2), ref.middle.grad()));
  CHECK(at::equal(rt.View(ChunkKind::kCompute, 3), ref.tail.grad()));
  CHECK(at::equal(rt.View(ChunkKind::kCompute, 1), plain.unused.to(at::kBFloat16)));  // untouched: no gradient
  CHECK_FALSE(rt.has_grad(1));
  RuntimeOptions fp32 = Options(64, at::kFloat, EvictionPolicyKind::kOpt, 1);
  fp32.grads_in_compute_chunks = true;
  at::Tensor w = at::randn({4}).requires_grad_();
  auto other = Store(1 << 20);
  CHECK_THROWS_WITH(ChunkRuntime({{"w", w, {0}}}, *other, fp32), Catch::Contains("not fp32"));
}

TEST_CASE("bf16 compute chunks keep an fp32 master", "[runtime]") {
  at::Tensor w = at::randn({4, 4}).requires_grad_();
  const at::Tensor original = w.detach().clone();
  auto store = Store(1 << 20);
  ChunkRuntime rt({{"w", w, {0}}}, *store, Options(64, at::kBFloat16, EvictionPolicyKind::kOpt, 1));
  CHECK(rt.View(ChunkKind::kCompute, 0).scalar_type() == at::kBFloat16);
  CHECK(at::equal(rt.View(ChunkKind::kMaster, 0), original));  // exact fp32 copy
  CHECK(rt.chunk_id(ChunkKind::kMaster, 0) != rt.chunk_id(ChunkKind::kCompute, 0));
}

TEST_CASE("without an fp32 master the compute chunk holds the weights and bf16 grad chunks the gradients",
          "[runtime][master_none]") {
  at::manual_seed(2);
  Toy chunked;
  {
    at::NoGradGuard g;
    for (auto* t : {&chunked.shared, &chunked.unused, &chunked.middle, &chunked.tail}) t->copy_(t->to(at::kBFloat16));
  }
  Toy ref;
  {
    at::NoGradGuard g;
    ref.shared = chunked.shared.detach().to(at::kBFloat16).requires_grad_();
    ref.unused = chunked.unused.detach().to(at::kBFloat16).requires_grad_();
    ref.middle = chunked.middle.detach().to(at::kBFloat16).requires_grad_();
    ref.tail = chunked.tail.detach().to(at::kBFloat16).requires_grad_();
  }
  auto store = Store(1 << 20);
  RuntimeOptions options = Options(64, at::kBFloat16, EvictionPolicyKind::kOpt, 1);
  options.master_weights = false;
  ChunkRuntime rt({{"shared", chunked.shared, {0, 2}},
                   {"unused", chunked.unused, {1}},
                   {"middle", chunked.middle, {1}},
                   {"tail", chunked.tail, {3}}},
                  *store, options);
  CHECK_FALSE(rt.separate_master());
  CHECK(rt.chunk_id(ChunkKind::kMaster, 0) == rt.chunk_id(ChunkKind::kCompute, 0));
  CHECK(store->num_chunks() == 4 * 4);  // compute, grad, m, v per layout chunk
  CHECK(rt.View(ChunkKind::kGrad, 0).scalar_type() == at::kBFloat16);
  CHECK(at::equal(rt.View(ChunkKind::kMaster, 0), ref.shared));  // the weights themselves
  const at::Tensor x = at::randn({3, 8});
  rt.ZeroGrads();
  Forward(chunked, x.to(at::kBFloat16), &rt).backward();
  rt.AfterBackward();
  Forward(ref, x.to(at::kBFloat16), nullptr).backward();
  // The tied parameter's two contributions add in bf16, as plain bf16 autograd adds them.
  CHECK(at::equal(rt.View(ChunkKind::kGrad, 0), ref.shared.grad()));
  CHECK(at::equal(rt.View(ChunkKind::kGrad, 2), ref.middle.grad()));
  CHECK(at::equal(rt.View(ChunkKind::kGrad, 3), ref.tail.grad()));
  CHECK(at::equal(rt.View(ChunkKind::kCompute, 2), ref.middle));  // the weights are intact
  RuntimeOptions fp16 = Options(64, at::kHalf, EvictionPolicyKind::kOpt, 1);
  fp16.master_weights = false;
  at::Tensor w = at::randn({4}).requires_grad_();
  auto other = Store(1 << 20);
  CHECK_THROWS_WITH(ChunkRuntime({{"w", w, {0}}}, *other, fp16), Catch::Contains("need the bf16 compute dtype"));
}

}  // namespace
}  // namespace ps::chunkmem

namespace ps::chunkmem {
namespace {

TEST_CASE("a graph that outlives its runtime fails cleanly in backward", "[runtime][teardown]") {
  at::manual_seed(0);
  Toy m;
  const at::Tensor x = at::randn({3, 8});
  auto store = Store(1 << 20);
  at::Tensor loss;
  {
    ChunkRuntime rt({{"shared", m.shared, {0, 2}}, {"unused", m.unused, {1}}, {"middle", m.middle, {1}},
                     {"tail", m.tail, {3}}},
                    *store, Options(64, at::kFloat, EvictionPolicyKind::kLru, 1));
    loss = Forward(m, x, &rt);
  }  // the runtime is gone; the graph in `loss` still has its pre-backward nodes
  CHECK_THROWS_WITH(loss.backward(), Catch::Contains("chunk runtime is gone"));
  CHECK(m.middle.numel() == 64);  // the model got its values back at teardown
}

}  // namespace
}  // namespace ps::chunkmem
