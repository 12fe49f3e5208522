// HybridAdam over a real ChunkRuntime (simulated device tier): the device path (fused
// LibTorch AdamW per chunk), the host path (SIMD kernels) and torch::optim::AdamW with
// clip_grad_norm_ agree; the tier plan puts chunks on the device only when hybrid is on
// and the margin allows; an fp16 overflow skips the step, leaves master/m/v bitwise
// untouched, restores the compute-dtype parameters from the masters and drives the
// loss scaler; chunks updated ahead (speculation) end bitwise where the plain step
// ends, whether the speculation is kept, clipped and redone, or undone by an overflow.
#include <ATen/ATen.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/adamw.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <future>
#include <limits>
#include <tuple>
#include <utility>

#include "chunkmem/chunk_store.h"
#include "chunkmem/copy_engine.h"
#include "chunkmem/memory_plan.h"
#include "chunkmem/runtime.h"
#include "optim/hybrid_adam.h"
#include "optim/int8_moments.h"
#include "optim/loss_scaler.h"
#include "tests/catch.h"

namespace ps::optim {
namespace {

using chunkmem::ChunkKind;

constexpr int64_t kWhole = chunkmem::kDeviceUpdateSliceNumel;  // larger than any chunk here
constexpr uint64_t kRoundingSeed = 0x1234567890abcdefULL;

struct Rig {
  std::vector<at::Tensor> initial;  // the parameters' starting values
  std::unique_ptr<chunkmem::CopyEngine> copies;  // before the store: outlives its copies
  std::unique_ptr<chunkmem::ChunkStore> store;
  std::unique_ptr<chunkmem::ChunkRuntime> runtime;
  std::unique_ptr<HybridAdam> adam;
  std::vector<at::Tensor> params;

  // `pipeline`: host updates take the CUDA path (to the host and back, one chunk
  // ahead); `async`: its copies run on a worker thread.
  // `fp32_grads`: fp32 grad chunks also in bf16/fp16 runs (as with accumulation), where
  // the compute chunk only receives the updated parameters.
  Rig(at::ScalarType dtype, bool hybrid, int64_t device_budget, bool pipeline = false, bool async = false,
      int speculation_slots = 0, int speculation_backoff_steps = 0, bool fp32_grads = false,
      at::ScalarType state_dtype = at::kFloat, int64_t device_slice_numel = chunkmem::kDeviceUpdateSliceNumel,
      bool master_weights = true) {
    at::manual_seed(1);
    initial = {at::randn({16, 24}), at::randn({24}), at::randn({24, 8}), at::randn({40})};
    std::vector<chunkmem::ManagedParam> managed;
    const char* names[] = {"w1", "b1", "w2", "norm"};
    for (size_t i = 0; i < initial.size(); ++i) {
      params.push_back(initial[i].clone().requires_grad_(true));
      managed.push_back({names[i], params.back(), {static_cast<int>(i)}});
    }
    store = std::make_unique<chunkmem::ChunkStore>(chunkmem::MakeHostAllocator(false),
                                                   chunkmem::MakeDeviceAllocator(at::kCPU), int64_t{1} << 30,
                                                   device_budget);
    if (async) {
      copies = chunkmem::MakeThreadCopyEngine();
      store->set_copy_engine(copies.get());
    }
    chunkmem::RuntimeOptions ro;
    ro.chunk_numel = 448;  // w1 + b1 share chunk 0; w2 + norm share chunk 1
    ro.compute_dtype = dtype;
    ro.state_dtype = state_dtype;
    ro.residency.eviction = chunkmem::EvictionPolicyKind::kLru;
    ro.residency.warmup_steps = 0;
    ro.grads_in_compute_chunks = dtype != at::kFloat && !fp32_grads && master_weights;
    ro.master_weights = master_weights;
    // Hybrid: optimizer state into the device margin at start-up, as the run's memory
    // plan decides it (chunkmem/memory_plan.h), handed to the runtime.
    chunkmem::PlanInput plan;
    for (const auto& p : managed) plan.params.push_back({p.name, p.tensor.numel(), p.used_by_blocks});
    plan.chunk_numel = ro.chunk_numel;
    plan.compute_element_bytes = static_cast<int64_t>(c10::elementSize(dtype));
    plan.state_element_bytes = static_cast<int64_t>(c10::elementSize(state_dtype));
    plan.grads_in_compute_chunks = ro.grads_in_compute_chunks;
    plan.master_weights = master_weights;
    plan.device_budget_bytes = store->Budget(chunkmem::Tier::kDevice);
    plan.host_budget_bytes = store->Budget(chunkmem::Tier::kHost);
    plan.margin_use_ratio = hybrid ? 0.8 : 0.0;
    ro.tiers = chunkmem::PlanMemory(plan).tiers;
    runtime = std::make_unique<chunkmem::ChunkRuntime>(managed, *store, ro);
    HybridAdamOptions o;
    o.optimizer.lr = 1e-2;
    o.optimizer.betas = {0.9, 0.95};
    o.optimizer.weight_decay = 0.1;
    o.optimizer.hybrid_adam = hybrid;
    o.cpu_isa = BestCpuIsa();
    o.cpu_threads = 2;
    o.pipeline_simulated = pipeline;
    o.speculation_slots = speculation_slots;
    o.speculation_backoff_steps = speculation_backoff_steps;
    o.device_slice_numel = device_slice_numel;
    o.rounding_seed = kRoundingSeed;
    adam = std::make_unique<HybridAdam>(*runtime, o);
  }

  // Delivers `grads` (fp32) as the runtime's gradient hooks would, times `scale`; a
  // parameter at index `skip` gets none.
  void Backward(const std::vector<at::Tensor>& grads, double scale = 1.0, int skip = -1) {
    runtime->ZeroGrads();
    for (size_t i = 0; i < grads.size(); ++i) {
      if (static_cast<int>(i) == skip) continue;
      params[i].mutable_grad() = (grads[i] * scale).to(runtime->compute_dtype());
      runtime->OnGradAccumulated(static_cast<int>(i));
    }
    runtime->AfterBackward();  // the grad chunks are complete only after it (staging flushes)
  }

  at::Tensor Master(int i) const { return runtime->View(ChunkKind::kMaster, i).clone(); }
};

std::vector<at::Tensor> Grads(const Rig& rig, uint64_t seed) {
  at::manual_seed(seed);
  std::vector<at::Tensor> out;
  for (const auto& p : rig.initial) out.push_back(at::randn(p.sizes()) * 0.5);
  return out;
}

TEST_CASE("device path, host path and torch::optim::AdamW agree (fp32, with clipping)", "[hybrid_adam]") {
  constexpr int64_t kUnlimited = int64_t{1} << 40;
  Rig device(at::kFloat, /*hybrid=*/true, kUnlimited);
  Rig host(at::kFloat, /*hybrid=*/false, kUnlimited);
  // LibTorch reference: decay on matrices only, as HybridAdam.
  std::vector<at::Tensor> ref;
  for (const auto& p : device.initial) ref.push_back(p.clone().requires_grad_(true));
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::vector<at::Tensor>{ref[0], ref[2]},
                      std::make_unique<torch::optim::AdamWOptions>(
                          torch::optim::AdamWOptions(1e-2).betas({0.9, 0.95}).weight_decay(0.1)));
  groups.emplace_back(std::vector<at::Tensor>{ref[1], ref[3]},
                      std::make_unique<torch::optim::AdamWOptions>(
                          torch::optim::AdamWOptions(1e-2).betas({0.9, 0.95}).weight_decay(0.0)));
  torch::optim::AdamW torch_adam(std::move(groups), torch::optim::AdamWOptions(1e-2));
  LossScaler off_a{PrecisionConfig{}}, off_b{PrecisionConfig{}};
  for (uint64_t step = 1; step <= 4; ++step) {
    const double max_norm = step % 2 == 0 ? 1.0 : std::numeric_limits<double>::infinity();  // clip on even steps
    const auto grads = Grads(device, step);
    device.Backward(grads);
    host.Backward(grads);
    const StepReport rd = device.adam->Step(1e-2, max_norm, off_a);
    const StepReport rh = host.adam->Step(1e-2, max_norm, off_b);
    for (size_t i = 0; i < ref.size(); ++i) ref[i].mutable_grad() = grads[i].clone();
    const double norm = torch::nn::utils::clip_grad_norm_(ref, max_norm);
    torch_adam.step();
    CHECK(rd.grad_norm == Approx(norm).epsilon(1e-6));
    CHECK(rh.grad_norm == Approx(norm).epsilon(1e-6));
    CHECK(rd.device_chunks == device.runtime->layout().num_chunks());
    CHECK(rd.host_chunks == 0);
    CHECK(rh.device_chunks == 0);
    CHECK(rh.host_chunks == host.runtime->layout().num_chunks());
    for (int i = 0; i < static_cast<int>(ref.size()); ++i) {
      INFO("step " << step << " param " << i);
      CHECK(at::allclose(device.Master(i), ref[i].detach(), 1e-6, 1e-7));
      CHECK(at::allclose(host.Master(i), ref[i].detach(), 1e-6, 1e-7));
    }
  }
}

bool Same(const at::Tensor& a, const at::Tensor& b) {
  return a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type() &&
         std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0;
}

// optimizer.state_dtype bf16: m and v chunks are bf16 (half the bytes), and both paths
// equal an fp32-moment run whose m and v are rounded to bf16 after every step, bitwise
// (the kernels' contract, optim/cpu_adam.h; the device path widens, runs the fused op
// and rounds): master, compute parameters, moments.
TEST_CASE("bf16 moments: device and host paths equal fp32 moments rounded after each step", "[hybrid_adam][state_dtype]") {
  constexpr int64_t kUnlimited = int64_t{1} << 40;
  // Device path with slices of 256 elements too: w1 (384) is cut in two batches.
  for (auto [dtype, hybrid, slice] : {std::tuple{at::kFloat, true, kWhole}, std::tuple{at::kFloat, true, int64_t{256}},
                                      std::tuple{at::kFloat, false, kWhole}, std::tuple{at::kBFloat16, true, kWhole},
                                      std::tuple{at::kBFloat16, true, int64_t{256}}, std::tuple{at::kBFloat16, false, kWhole}}) {
    {
      INFO(c10::toString(dtype) << (hybrid ? ", device path, slice " : ", host path") << slice);
      Rig bf16(dtype, hybrid, kUnlimited, false, false, 0, 0, false, at::kBFloat16, slice);
      Rig ref(dtype, hybrid, kUnlimited);
      const auto& m_payload = bf16.store->payload(bf16.runtime->chunk_id(ChunkKind::kAdamM, 0));
      CHECK(m_payload.scalar_type() == at::kBFloat16);
      CHECK(m_payload.nbytes() * 2 ==
            ref.store->payload(ref.runtime->chunk_id(ChunkKind::kAdamM, 0)).nbytes());
      LossScaler off_a{PrecisionConfig{}}, off_b{PrecisionConfig{}};
      for (uint64_t step = 1; step <= 4; ++step) {
        const auto grads = Grads(ref, step);
        bf16.Backward(grads);
        ref.Backward(grads);
        const StepReport a = bf16.adam->Step(1e-2, step % 2 == 0 ? 1.0 : 1e9, off_a);
        ref.adam->Step(1e-2, step % 2 == 0 ? 1.0 : 1e9, off_b);
        CHECK(a.device_chunks == (hybrid ? 2 : 0));
        for (int i = 0; i < static_cast<int>(ref.params.size()); ++i) {
          INFO("step " << step << " param " << i);
          for (ChunkKind kind : {ChunkKind::kAdamM, ChunkKind::kAdamV}) {
            at::Tensor r = ref.runtime->View(kind, i);
            r.copy_(r.to(at::kBFloat16));  // the reference's rounding, every step
            CHECK(Same(bf16.runtime->View(kind, i).to(at::kFloat), r.clone()));
          }
          CHECK(Same(bf16.Master(i), ref.Master(i)));
          CHECK(Same(bf16.runtime->View(ChunkKind::kCompute, i).clone(), ref.runtime->View(ChunkKind::kCompute, i).clone()));
        }
        bf16.runtime->EndIteration();
        ref.runtime->EndIteration();
      }
    }
  }
}

// optimizer.master_weights none (docs/optim.md): each update is the fp32 update of the
// bf16 weights (the fp32 run's, from the same values, gradients and moments), stored as
// FloatToBf16Stochastic(value, SrHash(offset in the chunk, seed)) with seed
// SrHash(step, SrHash(chunk, run seed's halves xor-ed)), on the host and on the device
// (in 256-element batches too). Round-to-nearest, another seed or index would fail it.
TEST_CASE("master_weights none: the fp32 update stochastically rounded into the bf16 weights, host and device",
          "[hybrid_adam][master_none]") {
  constexpr int64_t kUnlimited = int64_t{1} << 40;
  const uint32_t run = static_cast<uint32_t>(kRoundingSeed) ^ static_cast<uint32_t>(kRoundingSeed >> 32);
  for (auto [hybrid, slice] : {std::tuple{false, kWhole}, std::tuple{true, kWhole}, std::tuple{true, int64_t{256}}}) {
    INFO((hybrid ? "device path, slice " : "host path, slice ") << slice);
    Rig none(at::kBFloat16, hybrid, kUnlimited, false, false, 0, 0, false, at::kFloat, slice, /*master_weights=*/false);
    Rig ref(at::kFloat, hybrid, kUnlimited);
    CHECK(none.runtime->chunk_id(ChunkKind::kMaster, 0) == none.runtime->chunk_id(ChunkKind::kCompute, 0));
    LossScaler off_a{PrecisionConfig{}}, off_b{PrecisionConfig{}};
    int64_t rounded_up = 0, rounded_down = 0;
    for (int64_t step = 1; step <= 3; ++step) {
      for (int i = 0; i < static_cast<int>(ref.params.size()); ++i) {  // the reference starts from the bf16 weights
        ref.runtime->View(ChunkKind::kMaster, i).copy_(none.runtime->View(ChunkKind::kCompute, i));
      }
      std::vector<at::Tensor> grads = Grads(ref, static_cast<uint64_t>(step));
      for (auto& g : grads) g = g.to(at::kBFloat16).to(at::kFloat);  // the bf16 gradients both see
      none.Backward(grads);
      ref.Backward(grads);
      CHECK(none.adam->Step(1e-2, 1e9, off_a).device_chunks == (hybrid ? 2 : 0));
      ref.adam->Step(1e-2, 1e9, off_b);
      for (int i = 0; i < static_cast<int>(ref.params.size()); ++i) {
        INFO("step " << step << " param " << i);
        const auto& pl = none.runtime->layout().placements()[i];
        const uint32_t seed = SrHash(static_cast<uint32_t>(step), SrHash(static_cast<uint32_t>(pl.chunk_id), run));
        const at::Tensor want = ref.Master(i).reshape(-1).contiguous();
        const at::Tensor got = none.runtime->View(ChunkKind::kCompute, i).reshape(-1).contiguous();
        const float* w = want.data_ptr<float>();
        const uint16_t* g = reinterpret_cast<const uint16_t*>(got.data_ptr());
        int64_t wrong = 0;
        for (int64_t j = 0; j < want.numel(); ++j) {
          const uint16_t expected = FloatToBf16Stochastic(w[j], SrHash(static_cast<uint32_t>(pl.offset_numel + j), seed));
          wrong += g[j] != expected ? 1 : 0;
          const uint32_t lower = [&] { uint32_t b; std::memcpy(&b, &w[j], 4); return b >> 16; }();
          (g[j] != lower ? rounded_up : rounded_down) += 1;
        }
        CHECK(wrong == 0);
        CHECK(Same(none.runtime->View(ChunkKind::kAdamM, i).clone(), ref.runtime->View(ChunkKind::kAdamM, i).clone()));
      }
      none.runtime->EndIteration();
      ref.runtime->EndIteration();
    }
    CHECK(rounded_up > 100);  // both ways: not round-to-nearest, not truncation
    CHECK(rounded_down > 100);
  }
}

// The 8-bit moment of parameter i of `rig` (optim/int8_moments.h), dequantised.
at::Tensor Int8Values(const Rig& rig, ChunkKind kind, int i, QuantCode code) {
  const auto& pl = rig.runtime->layout().placements()[i];
  const Int8Moment moment = Int8MomentOf(rig.store->payload(rig.runtime->chunk_id(kind, pl.chunk_id)),
                                         rig.runtime->layout().chunks()[pl.chunk_id].capacity_numel, pl.offset_numel,
                                         pl.numel);
  return DequantizePackedInt8(PackInt8(moment), pl.numel, code);
}

// optimizer.state_dtype int8: the host path (the kernels) and the device path (LibTorch
// ops around the fused op) each equal an fp32-moment run of the same path whose m and v
// are quantised and dequantised block by block after every step, bitwise: master,
// compute parameters, moments.
TEST_CASE("int8 moments: host and device paths equal fp32 moments quantised after each step",
          "[hybrid_adam][state_dtype]") {
  constexpr int64_t kUnlimited = int64_t{1} << 40;
  for (auto [dtype, hybrid, slice] : {std::tuple{at::kFloat, false, kWhole}, std::tuple{at::kBFloat16, false, kWhole},
                                      std::tuple{at::kFloat, true, kWhole}, std::tuple{at::kBFloat16, true, kWhole},
                                      std::tuple{at::kFloat, true, int64_t{256}},
                                      std::tuple{at::kBFloat16, true, int64_t{256}}}) {
    INFO(c10::toString(dtype) << (hybrid ? ", device path, slice " : ", host path") << slice);
    Rig int8(dtype, hybrid, kUnlimited, false, false, 0, 0, false, at::kByte, slice);
    Rig ref(dtype, hybrid, kUnlimited);
    LossScaler off_a{PrecisionConfig{}}, off_b{PrecisionConfig{}};
    for (uint64_t step = 1; step <= 4; ++step) {
      const auto grads = Grads(ref, step);
      int8.Backward(grads);
      ref.Backward(grads);
      const StepReport report = int8.adam->Step(1e-2, step % 2 == 0 ? 1.0 : 1e9, off_a);
      ref.adam->Step(1e-2, step % 2 == 0 ? 1.0 : 1e9, off_b);
      CHECK((report.device_chunks > 0) == hybrid);
      for (int i = 0; i < static_cast<int>(ref.params.size()); ++i) {
        INFO("step " << step << " param " << i);
        for (auto [kind, code] : {std::pair{ChunkKind::kAdamM, QuantCode::kSigned}, std::pair{ChunkKind::kAdamV, QuantCode::kUnsigned}}) {
          at::Tensor r = ref.runtime->View(kind, i);
          const at::Tensor flat = r.reshape({-1}).contiguous();
          at::Tensor codes = at::empty({flat.numel()}, at::kByte), scales = at::empty({(flat.numel() + 255) / 256});
          QuantizeInt8(flat, code, Int8Moment{codes, scales});
          r.copy_(DequantizePackedInt8(PackInt8(Int8Moment{codes, scales}), flat.numel(), code).view(r.sizes()));
          CHECK(Same(Int8Values(int8, kind, i, code), r.reshape({-1}).contiguous()));
        }
        CHECK(Same(int8.Master(i), ref.Master(i)));
        CHECK(Same(int8.runtime->View(ChunkKind::kCompute, i).clone(), ref.runtime->View(ChunkKind::kCompute, i).clone()));
      }
      int8.runtime->EndIteration();
      ref.runtime->EndIteration();
    }
  }
}

// A device-updated chunk whose gradients and compute chunk are on the host (fp32 grad
// chunks, as with accumulation, the compute chunk evicted): the update reads the
// gradients and writes the new parameters across tiers, a slice at a time, and moves
// nothing; the result is bitwise that of the same chunks on the device.
TEST_CASE("device update with the compute chunk and the gradients on the host: same bits, nothing moves",
          "[hybrid_adam][device_slices]") {
  constexpr int64_t kUnlimited = int64_t{1} << 40;
  for (auto [state, slice] : {std::pair{at::kFloat, kWhole}, std::pair{at::kFloat, int64_t{256}},
                              std::pair{at::kBFloat16, int64_t{256}}, std::pair{at::kByte, int64_t{256}}}) {
    INFO("state " << c10::toString(state) << ", slice " << slice);
    Rig resident(at::kBFloat16, /*hybrid=*/true, kUnlimited, false, false, 0, 0, /*fp32_grads=*/true, state);
    Rig away(at::kBFloat16, /*hybrid=*/true, kUnlimited, false, false, 0, 0, /*fp32_grads=*/true, state, slice);
    LossScaler off_a{PrecisionConfig{}}, off_b{PrecisionConfig{}};
    for (uint64_t step = 1; step <= 3; ++step) {
      INFO("step " << step);
      const auto grads = Grads(resident, step);
      resident.Backward(grads);
      away.Backward(grads);
      const int n = away.runtime->layout().num_chunks();
      for (int c = 0; c < n; ++c) {
        resident.runtime->optimizer_moves().ToDevice(c);
        away.runtime->optimizer_moves().ToHost(c);
        away.store->Move(away.runtime->chunk_id(ChunkKind::kGrad, c), chunkmem::Tier::kHost);  // as flushed
      }
      const chunkmem::StoreStats before = away.store->stats();
      CHECK(resident.adam->Step(1e-2, 1.0, off_a).device_chunks == n);
      CHECK(away.adam->Step(1e-2, 1.0, off_b).device_chunks == n);
      CHECK(away.store->stats().h2d_copies == before.h2d_copies);  // no chunk moved
      CHECK(away.store->stats().d2h_copies == before.d2h_copies);
      for (int c = 0; c < n; ++c) {
        CHECK(away.store->tier(away.runtime->chunk_id(ChunkKind::kCompute, c)) == chunkmem::Tier::kHost);
        CHECK(away.store->tier(away.runtime->chunk_id(ChunkKind::kGrad, c)) == chunkmem::Tier::kHost);
      }
      for (int i = 0; i < 4; ++i) {
        INFO("param " << i);
        CHECK(Same(away.Master(i), resident.Master(i)));
        CHECK(Same(away.runtime->View(ChunkKind::kCompute, i).clone(), resident.runtime->View(ChunkKind::kCompute, i).clone()));
      }
      resident.runtime->EndIteration();
      away.runtime->EndIteration();
    }
  }
}

// The device update's scratch comes from the store's device tier: counted as device
// bytes while the update runs (a 256-element slice of fp32 grads, m and v and bf16
// parameters, 14 bytes per element with bf16 moments), given back after the step.
TEST_CASE("device update scratch: borrowed from the device tier during the step, given back", "[hybrid_adam][device_slices]") {
  constexpr int64_t kUnlimited = int64_t{1} << 40;
  Rig rig(at::kBFloat16, /*hybrid=*/true, kUnlimited, false, false, 0, 0, /*fp32_grads=*/true, at::kBFloat16, 256);
  LossScaler off{PrecisionConfig{}};
  rig.Backward(Grads(rig, 1));
  for (int c = 0; c < rig.runtime->layout().num_chunks(); ++c) {
    rig.runtime->optimizer_moves().ToHost(c);  // the compute slice is taken too
    rig.store->Move(rig.runtime->chunk_id(ChunkKind::kGrad, c), chunkmem::Tier::kHost);
  }
  const int64_t before = rig.store->stats().device_bytes;
  rig.store->ResetPeaks();
  REQUIRE(rig.adam->Step(1e-2, 1.0, off).device_chunks > 0);
  CHECK(rig.store->stats().device_bytes == before);
  CHECK(rig.store->stats().peak_device_bytes == before + 256 * (4 + 4 + 4 + 2));
}

// The device update's scratch is borrowed before any chunk's update starts: borrowing it
// may evict chunks (the device tier is full), which must not happen under an update that
// holds a chunk's payloads. With the smallest budget that takes every chunk's state and
// a buffer held beside the chunks, the borrow evicts; the result is bitwise that of an
// unlimited budget.
TEST_CASE("device update scratch evicts chunks before the updates, never under one: same bits",
          "[hybrid_adam][device_slices]") {
  constexpr int64_t kUnlimited = int64_t{1} << 40;
  Rig ref(at::kBFloat16, /*hybrid=*/true, kUnlimited, false, false, 0, 0, /*fp32_grads=*/true, at::kBFloat16, 256);
  LossScaler off_ref{PrecisionConfig{}};
  const auto grads = Grads(ref, 1);
  ref.Backward(grads);
  ref.adam->Step(1e-2, 1.0, off_ref);
  const int n = ref.runtime->layout().num_chunks();
  int64_t budget = 8192;
  while (Rig(at::kBFloat16, true, budget, false, false, 0, 0, true, at::kBFloat16, 256).adam->device_chunks().size() <
         static_cast<size_t>(n)) {
    budget += 256;
  }
  INFO("budget " << budget);
  Rig tight(at::kBFloat16, /*hybrid=*/true, budget, false, false, 0, 0, /*fp32_grads=*/true, at::kBFloat16, 256);
  tight.Backward(grads);
  for (int c = 0; c < n; ++c) tight.runtime->optimizer_moves().ToDevice(c);
  // While this is held 1,920 bytes are left: the scratch (m and v 256 x 8 bytes, the
  // compute slice 256 x 2; the gradients are fp32 on the device) fits only once a
  // compute chunk (448 x 2 bytes) is evicted, and m and v alone would not fit either, so
  // taking the scratch inside an update would evict under it.
  const int64_t left = budget - tight.store->stats().device_bytes;
  REQUIRE(left >= 1920);
  at::Tensor held = tight.store->Borrow(chunkmem::Tier::kDevice, left - 1920, at::kByte, false);
  const int64_t before = tight.runtime->stats().evictions;
  LossScaler off{PrecisionConfig{}};
  REQUIRE(tight.adam->Step(1e-2, 1.0, off).device_chunks == n);
  CHECK(tight.runtime->stats().evictions > before);
  tight.store->GiveBack(chunkmem::Tier::kDevice, held);
  for (int i = 0; i < 4; ++i) {
    INFO("param " << i);
    CHECK(Same(tight.Master(i), ref.Master(i)));
    CHECK(Same(tight.runtime->View(ChunkKind::kCompute, i).clone(), ref.runtime->View(ChunkKind::kCompute, i).clone()));
  }
}

TEST_CASE("pipelined host path (the CUDA one): one chunk ahead to the host, back after its update; same bits",
          "[hybrid_adam][pipeline]") {
  constexpr int64_t kUnlimited = int64_t{1} << 40;
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    for (bool async : {false, true}) {
      INFO(c10::toString(dtype) << (async ? ", async copies" : ", synchronous copies"));
      Rig plain(dtype, /*hybrid=*/false, kUnlimited);
      // A device budget of the two compute chunks (the pipeline never needs more) and one
      // fp32 gradient staging slot (else a slot would evict a compute chunk in backward).
      const int64_t both = plain.store->chunk_bytes(plain.runtime->chunk_id(ChunkKind::kCompute, 0)) +
                           plain.store->chunk_bytes(plain.runtime->chunk_id(ChunkKind::kCompute, 1)) +
                           std::max(plain.runtime->GradChunkBytes(0), plain.runtime->GradChunkBytes(1));
      Rig piped(dtype, /*hybrid=*/false, both, /*pipeline=*/true, async);
      const int n = piped.runtime->layout().num_chunks();
      REQUIRE(n == 2);
      LossScaler off_a{PrecisionConfig{}}, off_b{PrecisionConfig{}};
      for (uint64_t step = 1; step <= 3; ++step) {
        for (Rig* rig : {&plain, &piped}) {
          for (int c = 0; c < n; ++c) rig->runtime->optimizer_moves().ToDevice(c);
        }
        const auto grads = Grads(plain, step);
        plain.Backward(grads);
        piped.Backward(grads);
        const int64_t evictions = piped.runtime->stats().evictions, fetches = piped.runtime->stats().fetches;
        plain.adam->Step(1e-2, 1.0, off_a);
        const StepReport r = piped.adam->Step(1e-2, 1.0, off_b);
        CHECK(r.host_chunks == n);
        CHECK(piped.runtime->stats().evictions - evictions == n);  // each went to the host ...
        CHECK(piped.runtime->stats().fetches - fetches == n);      // ... and came back
        for (int c = 0; c < n; ++c) {
          CHECK(piped.store->tier(piped.runtime->chunk_id(ChunkKind::kCompute, c)) == chunkmem::Tier::kDevice);
        }
        for (int i = 0; i < static_cast<int>(plain.params.size()); ++i) {
          INFO("step " << step << " param " << i);
          CHECK(Same(piped.Master(i), plain.Master(i)));
          CHECK(Same(piped.runtime->View(ChunkKind::kCompute, i).clone(), plain.runtime->View(ChunkKind::kCompute, i).clone()));
        }
        plain.runtime->EndIteration();
        piped.runtime->EndIteration();
      }
    }
  }
}

TEST_CASE("staged parameters: a device compute chunk that only receives them gets them copied in, never leaves",
          "[hybrid_adam][pipeline]") {
  constexpr int64_t kUnlimited = int64_t{1} << 40;
  for (bool async : {false, true}) {
    INFO((async ? "async copies" : "synchronous copies"));
    Rig plain(at::kBFloat16, /*hybrid=*/false, kUnlimited, false, false, 0, 0, /*fp32_grads=*/true);
    const int64_t both = plain.store->chunk_bytes(plain.runtime->chunk_id(ChunkKind::kCompute, 0)) +
                         plain.store->chunk_bytes(plain.runtime->chunk_id(ChunkKind::kCompute, 1)) +
                         std::max(plain.runtime->GradChunkBytes(0), plain.runtime->GradChunkBytes(1));
    Rig piped(at::kBFloat16, /*hybrid=*/false, both, /*pipeline=*/true, async, 0, 0, /*fp32_grads=*/true);
    REQUIRE_FALSE(piped.runtime->grads_in_compute_chunks());
    LossScaler off_a{PrecisionConfig{}}, off_b{PrecisionConfig{}};
    for (uint64_t step = 1; step <= 3; ++step) {
      INFO("step " << step);
      for (Rig* rig : {&plain, &piped}) {
        for (int c = 0; c < 2; ++c) rig->runtime->optimizer_moves().ToDevice(c);
      }
      const int skip = step == 2 ? 3 : -1;  // step 2: `norm` (chunk 1) has no gradient, its values stand
      const auto grads = Grads(plain, step);
      plain.Backward(grads, 1.0, skip);
      piped.Backward(grads, 1.0, skip);
      const chunkmem::StoreStats before = piped.store->stats();
      const int64_t evictions = piped.runtime->stats().evictions;
      plain.adam->Step(1e-2, 1.0, off_a);
      const StepReport r = piped.adam->Step(1e-2, 1.0, off_b);
      CHECK(r.host_chunks == 2);
      CHECK(piped.runtime->stats().evictions == evictions);           // no compute chunk left the device
      CHECK(piped.store->stats().d2h_copies == before.d2h_copies);    // nothing came back to the host
      // One copy per run of adjacent updated parameters: w1+b1 (chunk 0) and w2+norm,
      // or w2 alone when norm has no gradient (chunk 1).
      CHECK(piped.store->stats().h2d_copies - before.h2d_copies == 2);
      CHECK(piped.store->stats().host_bytes == before.host_bytes);    // the staging buffers were given back
      for (int c = 0; c < 2; ++c) {
        CHECK(piped.store->tier(piped.runtime->chunk_id(ChunkKind::kCompute, c)) == chunkmem::Tier::kDevice);
      }
      for (int i = 0; i < 4; ++i) {
        INFO("param " << i);
        CHECK(Same(piped.Master(i), plain.Master(i)));
        CHECK(Same(piped.runtime->View(ChunkKind::kCompute, i).clone(), plain.runtime->View(ChunkKind::kCompute, i).clone()));
      }
      plain.runtime->EndIteration();
      piped.runtime->EndIteration();
    }
  }
}

TEST_CASE("gradient norm: whole chunks at once, parameter by parameter where one has no gradient", "[hybrid_adam][norm]") {
  // bf16 reuses the compute slots for gradients: a parameter without a gradient still
  // holds its value there, which must not enter the norm. Chunk 0 (w1, b1) has every
  // gradient, chunk 1 (w2, norm) lacks norm's.
  constexpr int64_t kUnlimited = int64_t{1} << 40;
  Rig rig(at::kBFloat16, /*hybrid=*/false, kUnlimited);
  const auto grads = Grads(rig, 3);
  rig.runtime->ZeroGrads();
  double expected = 0.0;
  for (int i = 0; i < 3; ++i) {
    const at::Tensor g = grads[i].to(at::kBFloat16);
    rig.params[i].mutable_grad() = g;
    rig.runtime->OnGradAccumulated(i);
    expected += g.to(at::kDouble).square().sum().item<double>();
  }
  LossScaler off{PrecisionConfig{}};
  const StepReport r = rig.adam->Step(1e-2, /*max_norm=*/0.0, off);
  CHECK(r.grad_norm == Approx(std::sqrt(expected)).epsilon(1e-12));
}

TEST_CASE("tier plan: a device budget without margin keeps every chunk on the host", "[hybrid_adam]") {
  Rig tight(at::kFloat, /*hybrid=*/true, /*device_budget=*/0);
  LossScaler off{PrecisionConfig{}};
  tight.Backward(Grads(tight, 1));
  const StepReport r = tight.adam->Step(1e-2, 1.0, off);
  CHECK(r.device_chunks == 0);
  CHECK(tight.adam->device_chunks().empty());
}

TEST_CASE("fp16 overflow: skipped, master/m/v untouched, compute params restored, scale lowered", "[hybrid_adam][fp16]") {
  // `away`: the compute chunks on the other tier than their masters when the overflow
  // is restored (a device master writes a host compute chunk and the other way round).
  for (auto [hybrid, away] : {std::pair{false, false}, std::pair{true, false}, std::pair{false, true}, std::pair{true, true}}) {
    INFO("hybrid " << hybrid << ", compute chunks away from their masters " << away);
    Rig rig(at::kHalf, hybrid, int64_t{1} << 40);
    PrecisionConfig pc;
    pc.dtype = Dtype::kFp16;
    pc.initial_scale_power = 10;
    pc.hysteresis = 2;
    LossScaler scaler(pc);
    rig.Backward(Grads(rig, 1), scaler.scale());
    StepReport r = rig.adam->Step(1e-2, 1.0, scaler);
    REQUIRE_FALSE(r.skipped);
    CHECK(r.loss_scale == 1024);
    for (int i = 0; i < 4; ++i) {  // the parameter copy is the rounded master
      CHECK(Same(rig.runtime->View(ChunkKind::kCompute, i), rig.Master(i).to(at::kHalf)));
    }
    std::vector<at::Tensor> master, m, v, compute;
    for (int i = 0; i < 4; ++i) {
      master.push_back(rig.Master(i));
      m.push_back(rig.runtime->View(ChunkKind::kAdamM, i).clone());
      v.push_back(rig.runtime->View(ChunkKind::kAdamV, i).clone());
      compute.push_back(rig.runtime->View(ChunkKind::kCompute, i).clone());
    }
    for (int attempt = 0; attempt < 2; ++attempt) {
      auto grads = Grads(rig, 2);
      grads[2][3][1] = attempt == 0 ? std::numeric_limits<float>::infinity() : std::numeric_limits<float>::quiet_NaN();
      rig.Backward(grads, scaler.scale());
      if (away) {
        for (int c = 0; c < rig.runtime->layout().num_chunks(); ++c) {
          if (hybrid) rig.runtime->optimizer_moves().ToHost(c);  // masters on the device
          else rig.runtime->optimizer_moves().ToDevice(c);       // masters on the host
        }
      }
      // The gradients overwrote the compute slots (14-bytes/param reuse) ...
      CHECK_FALSE(Same(rig.runtime->View(ChunkKind::kCompute, 0), compute[0]));
      r = rig.adam->Step(1e-2, 1.0, scaler);
      CHECK(r.skipped);
      for (int i = 0; i < 4; ++i) {
        INFO("attempt " << attempt << " param " << i);
        CHECK(Same(rig.Master(i), master[i]));
        CHECK(Same(rig.runtime->View(ChunkKind::kAdamM, i), m[i]));
        CHECK(Same(rig.runtime->View(ChunkKind::kAdamV, i), v[i]));
        CHECK(Same(rig.runtime->View(ChunkKind::kCompute, i), compute[i]));  // ... and are restored
      }
    }
    // Hysteresis 2: the first overflow is tolerated, the second halves the scale.
    CHECK(scaler.scale() == 512);
    CHECK(scaler.state().overflows == 2);
    // The next clean step updates again, with the loss scale divided out.
    rig.Backward(Grads(rig, 3), scaler.scale());
    r = rig.adam->Step(1e-2, 1.0, scaler);
    CHECK_FALSE(r.skipped);
    CHECK(r.grad_norm < 1e3);  // unscaled
    CHECK_FALSE(Same(rig.Master(0), master[0]));
  }
}

// fp16 runs of the speculation tests: a small scale, and no hysteresis, so an overflow
// lowers it at once.
PrecisionConfig SpeculationPrecision(at::ScalarType dtype) {
  PrecisionConfig pc;
  if (dtype == at::kHalf) {
    pc.dtype = Dtype::kFp16;
    pc.initial_scale_power = 10;
    pc.hysteresis = 1;
  }
  return pc;
}

// One speculation test step: its clip, the value one gradient element gets (0: none),
// whether the step is skipped, and the chunks kept and rolled back it expects.
struct Case {
  double max_norm;
  float bad_grad;
  bool overflow;
  int kept, rolled_back;
};

// Master, m, v, the compute chunks and the step counters of every parameter, bitwise.
void CheckSameState(const Rig& spec, const Rig& plain) {
  for (int i = 0; i < static_cast<int>(plain.params.size()); ++i) {
    INFO("param " << i);
    CHECK(Same(spec.Master(i), plain.Master(i)));
    CHECK(Same(spec.runtime->View(ChunkKind::kAdamM, i).clone(), plain.runtime->View(ChunkKind::kAdamM, i).clone()));
    CHECK(Same(spec.runtime->View(ChunkKind::kAdamV, i).clone(), plain.runtime->View(ChunkKind::kAdamV, i).clone()));
    if (plain.runtime->state_dtype() == at::kByte) {  // the codes above; the block scales too
      CHECK(Same(Int8Values(spec, ChunkKind::kAdamM, i, QuantCode::kSigned),
                 Int8Values(plain, ChunkKind::kAdamM, i, QuantCode::kSigned)));
      CHECK(Same(Int8Values(spec, ChunkKind::kAdamV, i, QuantCode::kUnsigned),
                 Int8Values(plain, ChunkKind::kAdamV, i, QuantCode::kUnsigned)));
    }
    CHECK(Same(spec.runtime->View(ChunkKind::kCompute, i).clone(), plain.runtime->View(ChunkKind::kCompute, i).clone()));
    CHECK(spec.adam->param_steps(i) == plain.adam->param_steps(i));
  }
}

TEST_CASE("speculative host updates: kept, clipped and redone, overflow undone; bitwise the plain step",
          "[hybrid_adam][speculation]") {
  constexpr int64_t kUnlimited = int64_t{1} << 40;
  const double inf = std::numeric_limits<double>::infinity();
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
    for (int slots : {1, 2}) {
      for (at::ScalarType state : {at::kFloat, at::kBFloat16, at::kByte}) {
        INFO(c10::toString(dtype) << ", " << slots << " slot(s), moments " << c10::toString(state));
        Rig plain(dtype, /*hybrid=*/false, kUnlimited, false, false, 0, 0, false, state);
        Rig spec(dtype, /*hybrid=*/false, kUnlimited, false, false, slots, 0, false, state);
        REQUIRE(spec.runtime->layout().num_chunks() >= 2);  // 3 with 8-bit state (parameters block-aligned)
        const PrecisionConfig pc = SpeculationPrecision(dtype);
        LossScaler scale_plain(pc), scale_spec(pc);
        // The gradient norm is ~16: a max norm of 1e-3 clips, 1e6 does not (coefficient 1).
        // 3e19: finite in fp32 and bf16 (inf in fp16), but its square is not: an overflow
        // unless clipping shrinks it.
        const float finf = std::numeric_limits<float>::infinity(), huge = 3e19f;
        const bool fp16 = dtype == at::kHalf;
        const Case cases[] = {{inf, 0, false, slots, 0},          {1e-3, 0, false, 0, slots},
                              {1e6, finf, true, 0, slots},        {1e6, 0, false, slots, 0},
                              {1e-3, 0, false, 0, slots},         {inf, huge, true, 0, slots},
                              {1e6, huge, fp16, 0, slots}};
        uint64_t seed = 1;
        for (const Case& k : cases) {
          auto grads = Grads(plain, seed++);
          // In chunk 1 (w2): speculated all the same (the worker does not look); on an
          // overflow the step skips and the rollback undoes what the update wrote.
          if (k.bad_grad != 0) grads[2][3][1] = k.bad_grad;
          plain.Backward(grads, scale_plain.scale());
          spec.Backward(grads, scale_spec.scale());
          spec.adam->BeginSpeculation(1e-2, scale_spec.scale());
          int speculated = 0;
          for (int c = 0; c < 2; ++c) speculated += spec.adam->Speculate(c) ? 1 : 0;
          CHECK(speculated == slots);
          const StepReport a = plain.adam->Step(1e-2, k.max_norm, scale_plain);
          const StepReport b = spec.adam->Step(1e-2, k.max_norm, scale_spec);
          INFO("max norm " << k.max_norm << ", bad gradient " << k.bad_grad);
          CHECK(a.skipped == k.overflow);
          CHECK(b.skipped == k.overflow);
          CHECK(b.speculated_chunks == k.kept);
          CHECK(b.rolled_back_chunks == k.rolled_back);
          CHECK((a.grad_norm == b.grad_norm || (std::isnan(a.grad_norm) && std::isnan(b.grad_norm))));
          CHECK(scale_plain.scale() == scale_spec.scale());
          CheckSameState(spec, plain);
          plain.runtime->EndIteration();
          spec.runtime->EndIteration();
        }
      }
    }
  }
}

// The CUDA path on the simulated tier (pipeline_simulated): compute chunks that sit on
// the device when their gradients are final go to the host on the copy engine, and the
// caller does not wait for the copy (the worker does). Bitwise the plain step in every
// outcome, and the chunks are back on the device after the step.
TEST_CASE("speculation of device-resident compute chunks: to the host on the copy engine, back after the step",
          "[hybrid_adam][speculation][pipeline]") {
  constexpr int64_t kUnlimited = int64_t{1} << 40;
  const double inf = std::numeric_limits<double>::infinity();
  for (auto [dtype, fp32_grads] : {std::pair{at::kFloat, false}, std::pair{at::kBFloat16, false},
                                   std::pair{at::kHalf, false}, std::pair{at::kBFloat16, true}, std::pair{at::kHalf, true}}) {
    // fp32_grads (as with accumulation): the compute chunk only receives the parameters,
    // so it stays on the device and the new ones are staged in the slot until Step.
    const bool staged = fp32_grads;
    INFO(c10::toString(dtype) << (staged ? ", fp32 grad chunks (staged)" : ""));
    Rig plain(dtype, /*hybrid=*/false, kUnlimited, false, false, 0, 0, fp32_grads);
    Rig sizer(dtype, /*hybrid=*/false, kUnlimited, false, false, 0, 0, fp32_grads);
    const int64_t both = sizer.store->chunk_bytes(sizer.runtime->chunk_id(ChunkKind::kCompute, 0)) +
                         sizer.store->chunk_bytes(sizer.runtime->chunk_id(ChunkKind::kCompute, 1)) +
                         std::max(sizer.runtime->GradChunkBytes(0), sizer.runtime->GradChunkBytes(1));
    // Copies on a worker that holds each speculation copy back until the test has seen
    // both Speculate calls return: a Speculate that waited for its copy would leave
    // `returned` false when the copy finally ran (after the 5 s timeout). Declared
    // before the rig, whose copy engine calls into them until it is gone.
    std::atomic<bool> armed{false}, returned{false}, copy_after_return{true};
    std::promise<void> release;
    std::shared_future<void> released = release.get_future().share();
    Rig spec(dtype, /*hybrid=*/false, both, /*pipeline=*/true, /*async=*/false, /*slots=*/2, 0, fp32_grads);
    spec.copies = chunkmem::MakeThreadCopyEngine([&] {
      if (!armed) return;
      released.wait_for(std::chrono::seconds(5));
      if (!returned) copy_after_return = false;
    });
    spec.store->set_copy_engine(spec.copies.get());
    const PrecisionConfig pc = SpeculationPrecision(dtype);
    LossScaler scale_plain(pc), scale_spec(pc);
    const float finf = std::numeric_limits<float>::infinity();
    const Case cases[] = {{inf, 0, false, 2, 0},    {1e-3, 0, false, 0, 2}, {1e6, finf, true, 0, 2},
                          {1e6, 0, false, 2, 0},    {inf, 3e19f, true, 0, 2}};
    uint64_t seed = 1;
    for (const Case& k : cases) {
      INFO("max norm " << k.max_norm << ", bad gradient " << k.bad_grad);
      for (Rig* rig : {&plain, &spec}) {
        for (int c = 0; c < 2; ++c) rig->runtime->optimizer_moves().ToDevice(c);
      }
      auto grads = Grads(plain, seed++);
      if (k.bad_grad != 0) grads[2][3][1] = k.bad_grad;
      plain.Backward(grads, scale_plain.scale());
      spec.Backward(grads, scale_spec.scale());
      const int64_t d2h_before = spec.store->stats().d2h_copies;
      spec.adam->BeginSpeculation(1e-2, scale_spec.scale());
      const bool hold = &k == &cases[0];  // the first step's copies are held back
      armed = hold;
      CHECK(spec.adam->Speculate(0));
      CHECK(spec.adam->Speculate(1));
      returned = true;
      if (hold) release.set_value();
      for (int c = 0; c < 2; ++c) {
        CHECK(spec.store->tier(spec.runtime->chunk_id(ChunkKind::kCompute, c)) ==
              (staged ? chunkmem::Tier::kDevice : chunkmem::Tier::kHost));
        CHECK(spec.runtime->residency().pinned(c) == !staged);  // staged: free to move, Step writes where it is
      }
      const StepReport a = plain.adam->Step(1e-2, k.max_norm, scale_plain);
      const StepReport b = spec.adam->Step(1e-2, k.max_norm, scale_spec);
      armed = false;
      CHECK(copy_after_return);
      if (staged) CHECK(spec.store->stats().d2h_copies == d2h_before);  // nothing came to the host
      CHECK(b.skipped == k.overflow);
      CHECK(b.speculated_chunks == k.kept);
      CHECK(b.rolled_back_chunks == k.rolled_back);
      CHECK((a.grad_norm == b.grad_norm || (std::isnan(a.grad_norm) && std::isnan(b.grad_norm))));
      for (int c = 0; c < 2; ++c) {
        CHECK_FALSE(spec.runtime->residency().pinned(c));
        CHECK(spec.store->tier(spec.runtime->chunk_id(ChunkKind::kCompute, c)) == chunkmem::Tier::kDevice);
      }
      CheckSameState(spec, plain);
      plain.runtime->EndIteration();
      spec.runtime->EndIteration();
    }
  }
}

TEST_CASE("speculation backs off for speculation_backoff_steps after a rollback", "[hybrid_adam][speculation]") {
  constexpr int64_t kUnlimited = int64_t{1} << 40;
  Rig rig(at::kFloat, /*hybrid=*/false, kUnlimited, false, false, /*slots=*/2, /*backoff_steps=*/2);
  LossScaler off{PrecisionConfig{}};
  const bool expect[] = {true, false, false, true};  // step 1 clips: steps 2 and 3 do not speculate
  for (int step = 0; step < 4; ++step) {
    INFO("step " << step + 1);
    rig.Backward(Grads(rig, step + 1));
    rig.adam->BeginSpeculation(1e-2, 1.0);
    CHECK(rig.adam->Speculate(0) == expect[step]);
    const StepReport r = rig.adam->Step(1e-2, step == 0 ? 1e-3 : 1e6, off);
    CHECK(r.rolled_back_chunks == (step == 0 ? 1 : 0));
    rig.runtime->EndIteration();
  }
}

TEST_CASE("speculation refuses device-updated chunks, and is off without slots or BeginSpeculation",
          "[hybrid_adam][speculation]") {
  constexpr int64_t kUnlimited = int64_t{1} << 40;
  Rig hybrid(at::kFloat, /*hybrid=*/true, kUnlimited, false, false, /*slots=*/2);
  REQUIRE(hybrid.adam->device_chunks().size() == 2);
  hybrid.Backward(Grads(hybrid, 1));
  hybrid.adam->BeginSpeculation(1e-2, 1.0);
  CHECK_FALSE(hybrid.adam->Speculate(0));  // its state is on the device: updated there
  Rig none(at::kFloat, /*hybrid=*/false, kUnlimited);
  none.Backward(Grads(none, 1));
  none.adam->BeginSpeculation(1e-2, 1.0);
  CHECK_FALSE(none.adam->Speculate(0));  // no slots
  Rig unopened(at::kFloat, /*hybrid=*/false, kUnlimited, false, false, /*slots=*/2);
  unopened.Backward(Grads(unopened, 1));
  CHECK_FALSE(unopened.adam->Speculate(0));  // no BeginSpeculation this step
}

}  // namespace
}  // namespace ps::optim
