// Speculation alone, over plain tensors (no runtime, no chunks): a kept update is the
// update; a rolled-back one leaves master, m, v and the compute copy bitwise as they were
// and reports the chunk for its step counts; a staged update writes the slot's staging
// part and leaves the compute payload alone; Start returns before the copy it waits on
// has run (the worker waits); a failure on the worker is rethrown by Wait; one update per
// chunk and step, none without a free slot or before Begin; the back-off after a
// rollback; the sums of squares Step reads back.
#include <ATen/ATen.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

#include "chunkmem/copy_engine.h"
#include "optim/cpu_adam.h"
#include "optim/speculation.h"
#include "tests/catch.h"

namespace ps::optim {
namespace {

constexpr int64_t kNumel = 48;

bool Same(const at::Tensor& a, const at::Tensor& b) {
  return a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type() &&
         std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0;
}

SpeculationOptions Options(int slots, int backoff_steps = 0) {
  SpeculationOptions o;
  o.slots = slots;
  o.backoff_steps = backoff_steps;
  o.slot_numel = 64;
  o.state_slot_numel = 64;
  o.compute_dtype = at::kBFloat16;
  o.kernels = KernelsFor(CpuIsa::kScalar);
  o.threads = 2;
  o.borrow_host = [](int64_t numel, at::ScalarType dtype) { return at::zeros({numel}, dtype); };
  return o;
}

// One chunk's payloads: fp32 master, m, v and gradient, a bf16 compute copy.
struct Chunk {
  at::Tensor master = at::randn({kNumel});
  at::Tensor m = at::randn({kNumel}).abs() * 0.1;
  at::Tensor v = at::randn({kNumel}).abs() * 0.01;
  at::Tensor grad = at::randn({kNumel});
  at::Tensor compute = master.to(at::kBFloat16);

  Chunk Clone() const {
    Chunk c;
    for (auto [to, from] : {std::pair{&c.master, &master}, std::pair{&c.m, &m}, std::pair{&c.v, &v},
                            std::pair{&c.grad, &grad}, std::pair{&c.compute, &compute}}) {
      *to = from->clone();
    }
    return c;
  }
  // The update's work, writing the parameters to `out` (the compute copy, or a staging buffer).
  Speculation::Work MakeWork(const at::Tensor& out) const {
    AdamWork w;
    w.span = {master.data_ptr<float>(), m.data_ptr<float>(), v.data_ptr<float>(), ElemType::kFp32, grad.data_ptr(),
              ElemType::kFp32, out.data_ptr(), ElemType::kBf16, kNumel};
    w.hyper = AdamHyper::Make(1e-2, 0.9, 0.95, 1e-8, 0.1, true, 3, 0.5);
    return {{w}, {{0, kNumel}}};
  }
  Speculation::Update MakeUpdate(int chunk, bool staged) const {
    Speculation::Update u;
    u.chunk = chunk;
    u.staged = staged;
    u.payloads = {master, m, v};
    if (!staged) u.payloads.push_back(compute);
    u.host_sum_spans = {{grad.data_ptr(), ElemType::kFp32, kNumel}};
    return u;
  }
  bool SameAs(const Chunk& other) const {
    return Same(master, other.master) && Same(m, other.m) && Same(v, other.v) && Same(compute, other.compute);
  }
};

void Start(Speculation& s, const Chunk& c, int chunk, bool staged = false) {
  s.Start(c.MakeUpdate(chunk, staged), [&c](const at::Tensor* staging) {
    return c.MakeWork(staging != nullptr ? *staging : c.compute);
  });
}

TEST_CASE("kept updates stand, rolled-back ones restore master, m, v and the compute copy", "[speculation]") {
  at::manual_seed(1);
  const Chunk before;
  Chunk expected = before.Clone();  // the plain update
  ParallelAdam(KernelsFor(CpuIsa::kScalar), expected.MakeWork(expected.compute).work, 1);
  for (bool stands : {true, false}) {
    INFO((stands ? "kept" : "rolled back"));
    Speculation s(Options(2));
    Chunk c = before.Clone();
    s.Begin(1e-2, 1.0);
    Start(s, c, 0);
    s.Wait();
    CHECK(c.SameAs(expected));  // the update ran on the worker
    std::vector<int> kept, rolled_back;
    const int undone = s.Finish(
        stands, [&](const Speculation::Record& r) { kept.push_back(r.chunk); },
        [&](const Speculation::Record& r) { rolled_back.push_back(r.chunk); });
    CHECK(undone == (stands ? 0 : 1));
    CHECK(kept == (stands ? std::vector<int>{0} : std::vector<int>{}));
    CHECK(rolled_back == (stands ? std::vector<int>{} : std::vector<int>{0}));
    CHECK(c.SameAs(stands ? expected : before));
  }
}

TEST_CASE("staged: the update writes the slot's staging part, the compute payload stays", "[speculation]") {
  at::manual_seed(2);
  Chunk c;
  const Chunk before = c.Clone();
  Chunk expected = before.Clone();
  ParallelAdam(KernelsFor(CpuIsa::kScalar), expected.MakeWork(expected.compute).work, 1);
  Speculation s(Options(1));
  s.Begin(1e-2, 1.0);
  Start(s, c, 3, /*staged=*/true);
  s.Wait();
  CHECK(Same(c.compute, before.compute));
  CHECK(Same(c.master, expected.master));
  s.Finish(
      true,
      [&](const Speculation::Record& r) {
        CHECK(r.staged);
        REQUIRE(r.staging != nullptr);
        REQUIRE(r.written.size() == 1);
        CHECK(Same(r.staging->narrow(0, 0, kNumel), expected.compute));
      },
      [](const Speculation::Record&) { FAIL("rolled back"); });
}

// A copy ticket that blocks its waiter until released, or throws.
class HeldCopy : public chunkmem::CopyTicket {
 public:
  explicit HeldCopy(bool fail = false) : fail_(fail), released_(release_.get_future().share()) {}
  void Wait() override {
    released_.wait_for(std::chrono::seconds(5));
    if (fail_) throw std::runtime_error("copy failed");
  }
  void Release() { release_.set_value(); }

 private:
  bool fail_;
  std::promise<void> release_;
  std::shared_future<void> released_;
};

TEST_CASE("Start returns before the chunk's copy has run; the worker waits for it", "[speculation]") {
  at::manual_seed(3);
  Chunk c;
  const Chunk before = c.Clone();
  Speculation s(Options(1));
  s.Begin(1e-2, 1.0);
  auto copy = std::make_shared<HeldCopy>();
  Speculation::Update u = c.MakeUpdate(0, false);
  u.copy = copy;
  const auto t0 = std::chrono::steady_clock::now();
  s.Start(std::move(u), [&c](const at::Tensor*) { return c.MakeWork(c.compute); });
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(2));  // did not wait for the copy
  CHECK(c.SameAs(before));  // the worker waits for it before anything else
  copy->Release();
  s.Wait();
  CHECK_FALSE(c.SameAs(before));
}

TEST_CASE("a failure on the worker is rethrown by Wait", "[speculation]") {
  Chunk c;
  Speculation s(Options(1));
  s.Begin(1e-2, 1.0);
  auto copy = std::make_shared<HeldCopy>(/*fail=*/true);
  copy->Release();
  Speculation::Update u = c.MakeUpdate(0, false);
  u.copy = copy;
  s.Start(std::move(u), [&c](const at::Tensor*) { return c.MakeWork(c.compute); });
  CHECK_THROWS_WITH(s.Wait(), "copy failed");
  s.Wait();  // reported once
}

TEST_CASE("one update per chunk and step, none without a free slot or before Begin", "[speculation]") {
  Chunk a, b;
  Speculation none(Options(0));
  none.Begin(1e-2, 1.0);
  CHECK_FALSE(none.CanTake(0));
  Speculation s(Options(2));
  CHECK_FALSE(s.CanTake(0));  // no Begin this step
  s.Begin(1e-2, 1.0);
  CHECK(s.CanTake(0));
  Start(s, a, 0);
  CHECK_FALSE(s.CanTake(0));  // once per step, though a slot is free
  CHECK(s.CanTake(1));
  Start(s, b, 1);
  CHECK_FALSE(s.CanTake(2));  // both slots are taken
  s.Wait();
  s.Finish(true, [](const Speculation::Record&) {}, [](const Speculation::Record&) {});
  CHECK_FALSE(s.CanTake(2));  // off until the next Begin
  s.Begin(1e-2, 1.0);
  CHECK(s.CanTake(0));
  Start(s, a, 0);
  s.Wait();
  s.Finish(true, [](const Speculation::Record&) {}, [](const Speculation::Record&) {});
}

TEST_CASE("after a rollback, backoff_steps steps do not speculate", "[speculation]") {
  Chunk c;
  Speculation s(Options(1, /*backoff_steps=*/2));
  const bool expect[] = {true, false, false, true};
  for (int step = 0; step < 4; ++step) {
    INFO("step " << step + 1);
    s.Begin(1e-2, 1.0);
    CHECK(s.CanTake(0) == expect[step]);
    if (s.CanTake(0)) Start(s, c, 0);
    s.Wait();
    s.Finish(step != 0, [](const Speculation::Record&) {}, [](const Speculation::Record&) {});  // step 1 rolls back
  }
}

TEST_CASE("sums of squares: the worker's host sum, or the device sums handed in", "[speculation]") {
  at::manual_seed(4);
  Chunk host, device;
  Speculation s(Options(2));
  s.Begin(1e-2, 1.0);
  const double expected = host.grad.to(at::kDouble).square().sum().item<double>();
  Start(s, host, 0);
  Speculation::Update u = device.MakeUpdate(1, false);
  u.host_sum_spans.clear();
  u.device_sums = {at::full({}, 7.0, at::kDouble)};
  s.Start(std::move(u), [&device](const at::Tensor*) { return device.MakeWork(device.compute); });
  s.Wait();
  double host_sum = 0.0;
  std::vector<at::Tensor> device_sums;
  CHECK(s.AddSumSquares(0, host_sum, device_sums));
  CHECK(host_sum == Approx(expected).epsilon(1e-12));
  CHECK(device_sums.empty());
  CHECK(s.AddSumSquares(1, host_sum, device_sums));
  REQUIRE(device_sums.size() == 1);
  CHECK(device_sums[0].item<double>() == 7.0);
  CHECK_FALSE(s.AddSumSquares(2, host_sum, device_sums));
  s.Finish(true, [](const Speculation::Record&) {}, [](const Speculation::Record&) {});
}

TEST_CASE("payloads that do not fit a slot: refused before the work is made, the slot stays free", "[speculation]") {
  // make_work has effects (HybridAdam's step counts advance; only a recorded entry is
  // undone by a rollback), so Start must not call it for an update it then refuses.
  Chunk c;
  Speculation s(Options(1));
  s.Begin(1e-2, 1.0);
  Speculation::Update u = c.MakeUpdate(0, false);
  u.payloads[0] = at::zeros({Options(1).slot_numel + 1});  // larger than the slot's master part
  int made = 0;
  CHECK_THROWS(s.Start(std::move(u), [&](const at::Tensor*) {
    ++made;
    return c.MakeWork(c.compute);
  }));
  CHECK(made == 0);
  CHECK(s.CanTake(0));  // no entry, no slot taken
  Start(s, c, 0);
  s.Wait();
  CHECK(s.Finish(false, [](const Speculation::Record&) {}, [](const Speculation::Record&) {}) == 1);
}

}  // namespace
}  // namespace ps::optim
