#include "optim/hybrid_adam.h"

#include <ATen/core/Tensor.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/full.h>
#include <ATen/ops/linalg_vector_norm.h>
#include <ATen/ops/stack.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <string>

namespace ps::optim {

using chunkmem::ChunkKind;
using chunkmem::Tier;

namespace {

double MsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

CpuAdamKernels KernelsWithPins(const HybridAdamOptions& options) {
  CpuAdamKernels kernels = KernelsFor(options.cpu_isa);
  kernels.pin_cpus = options.pin_cpus;
  return kernels;
}

// The tier plan put each chunk's optimizer state on its tier at start-up (tier_plan.h):
// chunks whose state is on the device update there, from the first step on.
std::vector<bool> OptimizerOnDevice(const chunkmem::ChunkRuntime& runtime) {
  std::vector<bool> on_device(runtime.layout().num_chunks(), false);
  for (int c = 0; c < runtime.layout().num_chunks(); ++c) on_device[c] = runtime.optimizer_on_device(c);
  return on_device;
}

// Chunks the optimizer updates: this rank's, and not frozen (compute kind alone).
bool Updated(const chunkmem::ChunkRuntime& runtime, int chunk) {
  return runtime.owned(chunk) && !runtime.frozen_chunk(chunk);
}

int64_t LargestChunkNumel(const chunkmem::ChunkRuntime& runtime) {
  int64_t largest = 0;
  for (int c = 0; c < runtime.layout().num_chunks(); ++c) {
    if (!runtime.frozen_chunk(c)) largest = std::max(largest, runtime.layout().chunks()[c].capacity_numel);
  }
  return largest;
}

chunkmem::HostPipelineSettings PipelineSettings(const chunkmem::ChunkRuntime& runtime,
                                                const HybridAdamOptions& options) {
  chunkmem::HostPipelineSettings s;
  // The CPU kernels cannot read device-tier chunks (CUDA, or the simulated tier with
  // pipeline_simulated).
  s.device_unreadable = runtime.store().device_of(Tier::kDevice).is_cuda() || options.pipeline_simulated;
  // A separate fp32 master with grad chunks: the compute chunk only receives the new
  // parameters (without a master the update reads the weights there too).
  s.compute_write_only = runtime.separate_master() && !runtime.grads_in_compute_chunks();
  s.compute_dtype = runtime.compute_dtype();
  s.staging_numel = LargestChunkNumel(runtime);
  s.nvme = runtime.nvme();
  return s;
}

// Speculation slots, at start-up (before any chunk moves, so the host reservation is
// not fragmented), each the size of the largest chunk; at most one per owned chunk
// updated on the host (the others never speculate), as the plan reserves them
// (chunkmem::TierPlan::speculation_slots); the store counts them.
SpeculationOptions SpeculationSettings(chunkmem::ChunkRuntime& runtime, const HybridAdamOptions& options,
                                       const CpuAdamKernels& kernels, const std::vector<bool>& on_device) {
  int host_updated = 0;
  for (int c = 0; c < runtime.layout().num_chunks(); ++c) host_updated += Updated(runtime, c) && !on_device[c] ? 1 : 0;
  SpeculationOptions s;
  s.slots = std::max(0, std::min(options.speculation_slots, host_updated));
  s.backoff_steps = options.speculation_backoff_steps;
  s.slot_numel = LargestChunkNumel(runtime);
  s.compute_dtype = runtime.separate_master() ? runtime.compute_dtype() : at::kFloat;
  s.master_dtype = runtime.separate_master() ? at::kFloat : runtime.compute_dtype();
  s.state_dtype = runtime.state_dtype();
  s.state_slot_numel = chunkmem::StatePayloadNumel(s.slot_numel, s.state_dtype);
  s.kernels = kernels;
  s.threads = options.cpu_threads;
  s.borrow_host = [&runtime](int64_t numel, at::ScalarType dtype) { return runtime.BorrowHost(numel, dtype); };
  return s;
}

// Gives the device update's scratch back when it leaves scope, on every path.
struct ScratchRelease {
  ChunkAdam& adam;
  ~ScratchRelease() { adam.EndDeviceUpdates(); }
};

// The device update's scratch: the runtime's device tier (counted and made room for).
DeviceScratchSource ScratchFrom(chunkmem::ChunkRuntime& runtime) {
  return {[&runtime](int64_t numel, at::ScalarType dtype) { return runtime.BorrowDevice(numel, dtype); },
          [&runtime](at::Tensor& buffer) { runtime.GiveBackDevice(buffer); }};
}

}  // namespace

HybridAdam::HybridAdam(chunkmem::ChunkRuntime& runtime, const HybridAdamOptions& options)
    : runtime_(runtime),
      options_(options),
      kernels_(KernelsWithPins(options)),
      chunk_adam_(runtime, options.optimizer, options.device_slice_numel, ScratchFrom(runtime), options.rounding_seed),
      on_device_(OptimizerOnDevice(runtime)),
      pipeline_(runtime.optimizer_moves(), PipelineSettings(runtime, options)),
      speculation_(SpeculationSettings(runtime, options, kernels_, on_device_)) {
  for (int c = 0; c < runtime.layout().num_chunks(); ++c) {
    if (on_device_[c]) device_chunks_.push_back(c);
  }
}

HybridAdam::~HybridAdam() = default;  // the speculation worker is joined first (declared last)

std::vector<at::Tensor> HybridAdam::ChunkGrads(int chunk) const {
  // When every parameter of the chunk has a gradient, the gradient region from the
  // chunk's start to its last parameter's end is reduced at once: the alignment gaps
  // between slots are zero (zeroed at start-up, never written). Otherwise parameter by
  // parameter (a slot without a gradient may hold the parameter, the 14-byte reuse).
  const auto& spec = runtime_.layout().chunks()[chunk];
  const auto& indices = spec.param_indices;
  const bool all =
      !indices.empty() && std::all_of(indices.begin(), indices.end(), [this](int i) { return runtime_.has_grad(i); });
  if (all) return {runtime_.store().payload(runtime_.chunk_id(ChunkKind::kGrad, chunk)).narrow(0, 0, spec.used_numel)};
  std::vector<at::Tensor> grads;
  for (int i : indices) {
    if (runtime_.has_grad(i)) grads.push_back(runtime_.View(ChunkKind::kGrad, i));
  }
  return grads;
}

std::vector<GradSpan> HybridAdam::GradSpans(const std::vector<at::Tensor>& grads) {
  std::vector<GradSpan> spans;
  for (const auto& g : grads) spans.push_back({g.data_ptr(), ElemTypeOf(g.scalar_type()), g.numel()});
  return spans;
}

double HybridAdam::HostSumSquares(const std::vector<at::Tensor>& grads) const {
  return ParallelSumSquares(kernels_, GradSpans(grads), options_.cpu_threads);
}

void HybridAdam::AddDeviceSumSquares(const std::vector<at::Tensor>& grads, std::vector<at::Tensor>& sums) {
  for (const auto& g : grads) sums.push_back(at::linalg_vector_norm(g, 2, {}, false, at::kDouble).square());
}

// The norm is a sum in chunk order of per-chunk sums (host chunks; device ones in one
// device reduction), so it does not depend on which chunks were speculated, whose sums
// were taken before their update (docs/optim.md, invariant 2).
double HybridAdam::SumSquares() {
  std::vector<at::Tensor> device_sums;  // one reduction per chunk (or per parameter), summed once
  double host_chunks_sum = 0.0;
  const auto& layout = runtime_.layout();
  for (int chunk = 0; chunk < layout.num_chunks(); ++chunk) {
    if (!Updated(runtime_, chunk)) continue;  // ZeRO: its owner counts it; frozen: no gradient
    // Taken by Speculate, where this loop would have taken it.
    if (speculation_.AddSumSquares(chunk, host_chunks_sum, device_sums)) continue;
    const std::vector<at::Tensor> grads = ChunkGrads(chunk);
    if (grads.empty()) continue;
    if (grads.front().is_cpu()) {
      host_chunks_sum += HostSumSquares(grads);
    } else {
      AddDeviceSumSquares(grads, device_sums);
    }
  }
  const at::Tensor device_sum = device_sums.empty() ? at::Tensor() : at::stack(device_sums).sum();
  double chunk_sum = host_chunks_sum + (device_sum.defined() ? device_sum.item<double>() : 0.0);  // the one host sync
  comm::Communicator* comm = runtime_.comm();
  if (comm != nullptr) {
    // ZeRO: each rank summed the reduced gradients of its own chunks; a non-finite one
    // anywhere makes the total non-finite, so every rank skips (one all-reduce per step).
    at::Tensor total = at::full({1}, chunk_sum, at::kDouble);
    if (comm->backend() == std::string("nccl")) total = total.to(runtime_.compute_device());
    comm->AllReduce(total, comm::ReduceOp::kSum)->Wait();
    chunk_sum = total.item<double>();
  }
  // Parameters outside the chunks are replicated under ZeRO (their gradients
  // all-reduced): counted once, after the chunks.
  return chunk_sum + HostSumSquares(host_params_.Grads());
}

void HybridAdam::RestoreComputeFromMaster() {
  if (!runtime_.grads_in_compute_chunks()) return;  // the compute slots still hold the parameters
  ScratchRelease release{chunk_adam_};  // a device master writing a host compute chunk takes scratch
  for (int c = 0; c < runtime_.layout().num_chunks(); ++c) {
    if (!Updated(runtime_, c)) continue;
    std::optional<chunkmem::NvmeMount> mount;  // a master on the NVMe tier is read through the ring
    if (runtime_.optimizer_on_nvme(c)) mount.emplace(*runtime_.nvme(), c);
    chunk_adam_.RestoreCompute(c);
  }
}

void HybridAdam::UpdateHostChunks(const std::vector<int>& chunks, double lr, double grad_scale) {
  // The pipeline hands each chunk over where the kernels can read it (or a staging
  // buffer for its new parameters) and says when the queued work must run: at once
  // per chunk when chunks move, else all together at the end.
  std::vector<AdamWork> work;
  pipeline_.Run(
      chunks,
      [&](int chunk, const at::Tensor* staging) { return chunk_adam_.AddHostWork(chunk, lr, grad_scale, work, staging); },
      [&] {
        ParallelAdam(kernels_, work, options_.cpu_threads);
        work.clear();
      });
}

void HybridAdam::BeginSpeculation(double lr, double loss_scale) { speculation_.Begin(lr, loss_scale); }

bool HybridAdam::StateInHostMemory(int chunk, chunkmem::HostAccess access) const {
  const auto& store = runtime_.store();
  const int compute_id = runtime_.chunk_id(ChunkKind::kCompute, chunk);
  for (ChunkKind kind : {ChunkKind::kCompute, ChunkKind::kGrad, ChunkKind::kMaster}) {
    const int id = runtime_.chunk_id(kind, chunk);
    if (id == compute_id && access != chunkmem::HostAccess::kInPlace) continue;  // the pipeline's to bring or stage
    if (!store.payload(id).is_cpu()) return false;
  }
  return true;
}

std::vector<at::Tensor> HybridAdam::UpdatedPayloads(int chunk, bool staged) const {
  const auto& store = runtime_.store();
  std::vector<at::Tensor> payloads;
  for (ChunkKind kind : {ChunkKind::kMaster, ChunkKind::kAdamM, ChunkKind::kAdamV}) {  // master: the compute chunk in fp32
    payloads.push_back(store.payload(runtime_.chunk_id(kind, chunk)));
  }
  // The update writes the parameters into the compute slots, over the gradients when
  // they share them: a redo needs both back.
  if (runtime_.separate_master() && !staged) {
    payloads.push_back(store.payload(runtime_.chunk_id(ChunkKind::kCompute, chunk)));
  }
  return payloads;
}

bool HybridAdam::Speculate(int chunk) {
  if (on_device_[chunk] || !Updated(runtime_, chunk) || !speculation_.CanTake(chunk)) return false;
  if (runtime_.optimizer_on_nvme(chunk)) return false;  // its state is read in the step, in order
  // The compute chunk (gradients in bf16/fp16 runs, the master in fp32 ones) comes to
  // the host first when the kernels cannot read it where it is, unless it only
  // receives the new parameters: then they are staged in the slot and copied in by
  // Step, if the speculation stands.
  const chunkmem::HostAccess access = pipeline_.AccessFor(chunk);
  if (!pipeline_.CanHold(chunk, access) || !StateInHostMemory(chunk, access)) return false;
  at::NoGradGuard no_grad;
  Speculation::Update u;
  u.chunk = chunk;
  u.staged = access == chunkmem::HostAccess::kStaged;
  // The chunk's sum of squares is taken where Step would take it (invariant 2): on a
  // CUDA device, queued on the compute stream now, before the copy (which is ordered
  // after it); on the host, by the worker, before the update overwrites the gradients.
  std::vector<at::Tensor> grads = ChunkGrads(chunk);
  if (!grads.empty() && !grads.front().is_cpu()) AddDeviceSumSquares(grads, u.device_sums);
  // Held in place until Step; a brought chunk's copy is waited for by the worker, not
  // by backward. A staged chunk is not held: the worker never touches it.
  u.copy = pipeline_.Hold(chunk, access);
  if (u.device_sums.empty()) {
    if (access == chunkmem::HostAccess::kBring) grads = ChunkGrads(chunk);  // now the host payload's
    u.host_sum_spans = GradSpans(grads);
  }
  u.payloads = UpdatedPayloads(chunk, u.staged);
  // What Step does with a clip coefficient of 1: grad_scale 1 / loss scale.
  speculation_.Start(std::move(u), [&](const at::Tensor* staging) {
    Speculation::Work w;
    w.written = chunk_adam_.AddHostWork(chunk, speculation_.lr(), 1.0 / speculation_.loss_scale(), w.work, staging);
    return w;
  });
  return true;
}

std::vector<bool> HybridAdam::FinishSpeculation(bool stands, StepReport& r) {
  std::vector<bool> kept(runtime_.layout().num_chunks(), false);
  chunkmem::HostPipeline::Tickets staged_copies;
  pipeline_.UnpinHeld();
  r.rolled_back_chunks = speculation_.Finish(
      stands,
      [&](const Speculation::Record& s) {
        kept[s.chunk] = true;
        ++r.speculated_chunks;
        if (s.staged) pipeline_.WriteStaged(s.chunk, *s.staging, s.written, staged_copies);
      },
      [&](const Speculation::Record& s) { chunk_adam_.UndoSteps(s.chunk); });
  pipeline_.Wait(staged_copies);  // before the slots are reused
  return kept;
}

StepReport HybridAdam::Step(double lr, double max_norm, LossScaler& scaler) {
  at::NoGradGuard no_grad;
  speculation_.Wait();  // every speculated update is done before anything reads the chunks
  StepReport r;
  r.loss_scale = scaler.scale();
  const double sum_squares = SumSquares();
  r.grad_norm = std::sqrt(sum_squares) / r.loss_scale;
  const double clip_coef =
      max_norm > 0 && std::isfinite(max_norm) ? std::min(1.0, max_norm / (r.grad_norm + 1e-6)) : 1.0;
  const bool overflow = !std::isfinite(sum_squares) || r.grad_norm * clip_coef > kMaxUpdateGradNorm;
  scaler.Update(overflow);
  // Speculated chunks (Speculate) stand when this step's grad_scale is the one they
  // assumed (clip coefficient 1, the same loss scale) at the same lr; else restored.
  const double grad_scale = clip_coef / r.loss_scale;
  const bool speculation_stands =
      !overflow && grad_scale == 1.0 / speculation_.loss_scale() && lr == speculation_.lr();
  const std::vector<bool> kept = FinishSpeculation(speculation_stands, r);
  if (overflow) {  // skipped with or without a scaler (fp32/bf16: the caller stops)
    r.skipped = true;
    RestoreComputeFromMaster();
    host_params_.ClearGrads();
    pipeline_.ReturnHeld();
    return r;
  }
  std::vector<int> host_chunks;
  for (int chunk = 0; chunk < runtime_.layout().num_chunks(); ++chunk) {
    if (!on_device_[chunk] && Updated(runtime_, chunk) && !kept[chunk]) host_chunks.push_back(chunk);
  }
  // Device chunks first: on CUDA their fused updates queue on the GPU and run while the
  // CPU kernels update the host chunks, and the host pipeline's send-backs come last, so
  // nothing the device path fetches evicts a chunk just sent back.
  auto t0 = std::chrono::steady_clock::now();
  if (!device_chunks_.empty()) {
    // The fused op divides gradients by its grad_scale: pass 1 / (clip_coef / loss_scale).
    const at::Tensor unscale =
        at::full({}, 1.0 / grad_scale, at::TensorOptions().dtype(at::kFloat).device(runtime_.compute_device()));
    ScratchRelease release{chunk_adam_};
    chunk_adam_.BeginDeviceUpdates(device_chunks_);
    for (int chunk : device_chunks_) {
      // The fused op reads the compute chunk on the device where it is the master (fp32)
      // or holds the gradients.
      if (runtime_.grads_in_compute_chunks() || !runtime_.separate_master()) pipeline_.PlaceOnDevice(chunk);
      chunk_adam_.UpdateOnDevice(chunk, lr, grad_scale, unscale);
    }
  }
  r.device_chunks = static_cast<int>(device_chunks_.size());
  r.device_ms = MsSince(t0);
  t0 = std::chrono::steady_clock::now();
  UpdateHostChunks(host_chunks, lr, grad_scale);
  host_params_.Update(kernels_, options_.cpu_threads, options_.optimizer, lr, grad_scale);
  host_params_.ClearGrads();
  pipeline_.ReturnHeld();  // chunks Speculate brought to the host, when they fit
  r.host_ms = MsSince(t0);
  r.host_chunks = static_cast<int>(host_chunks.size()) + r.speculated_chunks;
  return r;
}

}  // namespace ps::optim
