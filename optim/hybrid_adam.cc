#include "optim/hybrid_adam.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <cmath>
#include <limits>
#include <string>

#include "chunkmem/copy_engine.h"

namespace ps::optim {

using chunkmem::ChunkKind;
using chunkmem::Tier;

namespace {

ElemType ElemOf(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return ElemType::kFp32;
    case at::kHalf: return ElemType::kFp16;
    case at::kBFloat16: return ElemType::kBf16;
    default: TORCH_CHECK(false, "HybridAdam: unsupported chunk dtype ", t);
  }
}

double MsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

HybridAdam::HybridAdam(chunkmem::ChunkRuntime& runtime, const HybridAdamOptions& options)
    : runtime_(runtime), options_(options), kernels_(KernelsFor(options.cpu_isa)) {
  kernels_.pin_cpus = options.pin_cpus;
  for (int i = 0; i < static_cast<int>(runtime.params().size()); ++i) {
    decay_.push_back(runtime.param_dim(i) >= 2);
  }
  steps_.assign(decay_.size(), 0);
  device_steps_.resize(decay_.size());
  // The runtime placed each chunk's optimizer state at start-up (chunkmem/placement.h):
  // chunks whose state is on the device update there, from the first step on.
  on_device_.assign(runtime.layout().num_chunks(), false);
  for (int c = 0; c < runtime.layout().num_chunks(); ++c) {
    if (!runtime.optimizer_on_device(c)) continue;
    on_device_[c] = true;
    device_chunks_.push_back(c);
  }
  device_unreadable_ = runtime.store().device_of(Tier::kDevice).is_cuda() || options.pipeline_simulated;
  compute_receives_params_only_ = runtime.compute_dtype() != at::kFloat && !runtime.grads_in_compute_chunks();
  for (const auto& spec : runtime.layout().chunks()) {
    largest_chunk_numel_ = std::max(largest_chunk_numel_, spec.capacity_numel);
  }
  // Speculation slots, at start-up (before any chunk moves, so the host reservation is
  // not fragmented), each the size of the largest chunk; at most one per owned chunk
  // updated on the host (the others never speculate), as the plan reserves them
  // (chunkmem::Placement::speculation_slots); the store counts them.
  int host_updated = 0;
  for (int c = 0; c < runtime.layout().num_chunks(); ++c) host_updated += runtime.owned(c) && !on_device_[c] ? 1 : 0;
  slots_.resize(std::max(0, std::min(options.speculation_slots, host_updated)));
  slot_used_.assign(slots_.size(), false);
  for (Backup& slot : slots_) {
    slot.master = runtime.BorrowHost(largest_chunk_numel_, at::kFloat);
    slot.m = runtime.BorrowHost(largest_chunk_numel_, at::kFloat);
    slot.v = runtime.BorrowHost(largest_chunk_numel_, at::kFloat);
    if (runtime.compute_dtype() != at::kFloat) slot.compute = runtime.BorrowHost(largest_chunk_numel_, runtime.compute_dtype());
  }
}

HybridAdam::~HybridAdam() {
  if (!worker_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

void HybridAdam::RunOnWorker(std::function<void()> job) {
  if (!worker_.joinable()) {
    worker_ = std::thread([this] {
      std::unique_lock<std::mutex> lock(mu_);
      for (;;) {
        cv_.wait(lock, [this] { return stop_ || !jobs_.empty(); });
        if (jobs_.empty()) return;
        std::function<void()> next = std::move(jobs_.front());
        jobs_.pop_front();
        ++running_;
        lock.unlock();
        try {
          next();
        } catch (...) {
          std::lock_guard<std::mutex> relock(mu_);
          if (!failure_) failure_ = std::current_exception();
        }
        lock.lock();
        --running_;
        cv_.notify_all();
      }
    });
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_.push_back(std::move(job));
  }
  cv_.notify_all();
}

void HybridAdam::WaitSpeculation() {
  if (!worker_.joinable()) return;
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return jobs_.empty() && running_ == 0; });
  if (failure_) {
    std::exception_ptr e = failure_;
    failure_ = nullptr;
    std::rethrow_exception(e);
  }
}

void HybridAdam::AddHostParam(const std::string& name, const at::Tensor& param) {
  TORCH_CHECK(param.is_cpu() && param.scalar_type() == at::kFloat && param.is_contiguous(),
              "HybridAdam: host parameter '", name, "' must be a contiguous fp32 CPU tensor");
  host_params_.push_back({name, param, at::zeros_like(param), at::zeros_like(param), param.dim() >= 2, 0});
}

void HybridAdam::set_param_steps(int index, int64_t steps) {
  TORCH_CHECK(steps >= 0, "HybridAdam: negative step count for parameter ", index);
  steps_.at(index) = steps;
  device_steps_.at(index) = at::Tensor();  // the fused op's counter is rebuilt from steps_
}

std::vector<HybridAdam::HostParamState> HybridAdam::host_param_states() const {
  std::vector<HostParamState> out;
  for (const auto& hp : host_params_) out.push_back({hp.name, hp.param, hp.m, hp.v, hp.steps});
  return out;
}

void HybridAdam::set_host_param_steps(const std::string& name, int64_t steps) {
  for (auto& hp : host_params_) {
    if (hp.name == name) {
      hp.steps = steps;
      return;
    }
  }
  TORCH_CHECK(false, "HybridAdam: no host parameter '", name, "'");
}

void HybridAdam::ClearHostGrads() {
  for (auto& hp : host_params_) hp.param.mutable_grad() = at::Tensor();
}

void HybridAdam::UpdateHostParams(double lr, double grad_scale) {
  const auto& c = options_.optimizer;
  std::vector<AdamWork> work;
  for (auto& hp : host_params_) {
    const at::Tensor grad = hp.param.grad();
    if (!grad.defined()) continue;  // unused this step: not updated (as LibTorch)
    AdamWork w;
    w.span.master = hp.param.data_ptr<float>();
    w.span.m = hp.m.data_ptr<float>();
    w.span.v = hp.v.data_ptr<float>();
    w.span.grad = grad.data_ptr();
    w.span.grad_type = ElemType::kFp32;
    w.span.numel = hp.param.numel();
    w.hyper = AdamHyper::Make(lr, c.betas[0], c.betas[1], c.eps, hp.decay ? c.weight_decay : 0.0,
                              c.type == OptimizerType::kAdamW, ++hp.steps, grad_scale);
    work.push_back(w);
  }
  ParallelAdam(kernels_, work, options_.cpu_threads);
}

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
  for (const auto& g : grads) spans.push_back({g.data_ptr(), ElemOf(g.scalar_type()), g.numel()});
  return spans;
}

double HybridAdam::HostSumSquares(const std::vector<at::Tensor>& grads) const {
  return ParallelSumSquares(kernels_, GradSpans(grads), options_.cpu_threads);
}

// The norm is a sum in chunk order of per-chunk sums (host chunks; device ones in one
// device reduction), so it does not depend on which chunks were speculated, whose sums
// were taken before their update (docs/optim.md, invariant 2).
double HybridAdam::SumSquares() {
  std::vector<at::Tensor> device_sums;  // one reduction per chunk (or per parameter), summed once
  double host_chunks_sum = 0.0;
  const auto& layout = runtime_.layout();
  for (int chunk = 0; chunk < layout.num_chunks(); ++chunk) {
    if (!runtime_.owned(chunk)) continue;  // ZeRO: its owner counts it
    const auto spec = std::find_if(speculated_.begin(), speculated_.end(),
                                   [chunk](const Speculation& s) { return s.chunk == chunk; });
    if (spec != speculated_.end()) {  // taken by Speculate, where this loop would have
      if (spec->device_sums.empty()) {
        host_chunks_sum += slots_[spec->slot].sum_squares;
      } else {
        device_sums.insert(device_sums.end(), spec->device_sums.begin(), spec->device_sums.end());
      }
      continue;
    }
    const std::vector<at::Tensor> grads = ChunkGrads(chunk);
    if (grads.empty()) continue;
    if (grads.front().is_cpu()) {
      host_chunks_sum += HostSumSquares(grads);
    } else {
      for (const auto& g : grads) device_sums.push_back(at::linalg_vector_norm(g, 2, {}, false, at::kDouble).square());
    }
  }
  const at::Tensor device_sum = device_sums.empty() ? at::Tensor() : at::stack(device_sums).sum();
  std::vector<at::Tensor> host_param_grads;
  for (const auto& hp : host_params_) {
    if (hp.param.grad().defined()) host_param_grads.push_back(hp.param.grad());
  }
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
  return chunk_sum + HostSumSquares(host_param_grads);
}

void HybridAdam::RestoreComputeFromMaster() {
  if (!runtime_.grads_in_compute_chunks()) return;  // the compute slots still hold the parameters
  const auto& store = runtime_.store();
  for (int c = 0; c < runtime_.layout().num_chunks(); ++c) {
    if (!runtime_.owned(c)) continue;
    store.payload(runtime_.chunk_id(ChunkKind::kCompute, c)).copy_(store.payload(runtime_.chunk_id(ChunkKind::kMaster, c)));
  }
}

void HybridAdam::AddChunkWork(int chunk, double lr, double grad_scale, std::vector<AdamWork>& work,
                              const at::Tensor* staging) {
  const auto& c = options_.optimizer;
  const bool adamw = c.type == OptimizerType::kAdamW;
  const bool separate_master = runtime_.compute_dtype() != at::kFloat;
  for (int i : runtime_.layout().chunks()[chunk].param_indices) {
    if (!runtime_.has_grad(i)) continue;
    const at::Tensor master = runtime_.View(ChunkKind::kMaster, i);
    const at::Tensor grad = runtime_.View(ChunkKind::kGrad, i);
    AdamWork w;
    w.span.master = master.data_ptr<float>();
    w.span.m = runtime_.View(ChunkKind::kAdamM, i).data_ptr<float>();
    w.span.v = runtime_.View(ChunkKind::kAdamV, i).data_ptr<float>();
    w.span.grad = grad.data_ptr();
    w.span.grad_type = ElemOf(grad.scalar_type());
    if (separate_master) {
      const auto& pl = runtime_.layout().placements()[i];
      const at::Tensor out = staging != nullptr ? staging->narrow(0, pl.offset_numel, pl.numel)
                                                : runtime_.View(ChunkKind::kCompute, i);
      w.span.param_out = out.data_ptr();
      w.span.out_type = ElemOf(out.scalar_type());
    }
    w.span.numel = master.numel();
    w.hyper = AdamHyper::Make(lr, c.betas[0], c.betas[1], c.eps, decay_[i] ? c.weight_decay : 0.0, adamw,
                              ++steps_[i], grad_scale);
    work.push_back(w);
  }
}

void HybridAdam::CopyStagedIn(int chunk, const at::Tensor& staging,
                              std::vector<std::shared_ptr<chunkmem::CopyTicket>>& tickets) {
  const auto& placements = runtime_.layout().placements();
  int64_t begin = -1, end = -1;  // the current run of adjacent updated parameters
  auto flush = [&] {
    if (begin < 0) return;
    auto ticket = runtime_.WriteComputeChunk(chunk, begin, staging.narrow(0, begin, end - begin));
    if (ticket) tickets.push_back(std::move(ticket));
    begin = end = -1;
  };
  for (int i : runtime_.layout().chunks()[chunk].param_indices) {
    if (!runtime_.has_grad(i)) {  // not updated: its device values stand
      flush();
      continue;
    }
    const auto& pl = placements[i];
    if (begin >= 0 && pl.offset_numel != end) flush();  // an alignment gap: not copied
    if (begin < 0) begin = pl.offset_numel;
    end = pl.offset_numel + pl.numel;
  }
  flush();
}

void HybridAdam::UpdateHostChunks(const std::vector<int>& chunks, double lr, double grad_scale) {
  const auto& store = runtime_.store();
  // The CPU kernels need the compute chunk (gradients, or the master in fp32, or the
  // parameter copy) in host memory; a simulated device tier already is. Chunks on a
  // CUDA device are brought over one ahead (asynchronously with a copy engine), so
  // chunk k+1's copy overlaps chunk k's update, and sent back after their update, so
  // the next forward finds them where the last backward left them.
  // Unless the compute chunk only receives the new parameters (bf16/fp16 with fp32
  // grad chunks, e.g. accumulation): then they are written into a host staging buffer
  // (two, alternating) and copied into the device chunk, which stays where it is: one
  // copy instead of two, and no chunk leaves the device.
  std::vector<bool> remote(chunks.size(), false);
  bool any_remote = false;
  for (size_t k = 0; k < chunks.size(); ++k) {
    remote[k] = device_unreadable_ && store.tier(runtime_.chunk_id(ChunkKind::kCompute, chunks[k])) == Tier::kDevice;
    any_remote = any_remote || remote[k];
  }
  // The buffers go back on every path, an exception's included (a copy still reading
  // one keeps its memory alive through its ticket).
  struct Staging {
    chunkmem::ChunkRuntime& runtime;
    at::Tensor buffer[2];
    ~Staging() {
      for (at::Tensor& b : buffer) runtime.GiveBackHost(b);
    }
  } staged{runtime_};
  at::Tensor* staging = staged.buffer;
  std::vector<std::shared_ptr<chunkmem::CopyTicket>> staged_copies[2];
  if (any_remote && compute_receives_params_only_) {
    for (int b = 0; b < 2; ++b) staging[b] = runtime_.TryBorrowHost(largest_chunk_numel_, runtime_.compute_dtype());
    if (!staging[0].defined() || !staging[1].defined()) {  // no room for both: move chunks instead
      for (int b = 0; b < 2; ++b) runtime_.GiveBackHost(staging[b]);
    }
  }
  const bool stage = staging[0].defined();
  std::vector<bool> move(chunks.size(), false);
  for (size_t k = 0; k < chunks.size(); ++k) move[k] = remote[k] && !stage;
  std::vector<AdamWork> work;
  for (size_t k = 0; k < chunks.size(); ++k) {
    const int chunk = chunks[k];
    if (remote[k] && stage) {
      const size_t b = k % 2;
      for (auto& t : staged_copies[b]) runtime_.WaitCopy(*t);  // chunk k-2's copies out of this buffer
      staged_copies[b].clear();
      AddChunkWork(chunk, lr, grad_scale, work, &staging[b]);
      ParallelAdam(kernels_, work, options_.cpu_threads);
      work.clear();
      CopyStagedIn(chunk, staging[b], staged_copies[b]);  // overlaps chunk k+1's update
      continue;
    }
    if (move[k]) runtime_.PlaceComputeChunk(chunk, Tier::kHost, /*async=*/true);
    if (k + 1 < chunks.size() && move[k + 1]) {
      runtime_.PlaceComputeChunk(chunks[k + 1], Tier::kHost, /*async=*/true);
    }
    AddChunkWork(chunk, lr, grad_scale, work);
    if (any_remote) {  // pipelined: update this chunk while the next one's copy runs
      ParallelAdam(kernels_, work, options_.cpu_threads);
      work.clear();
      if (move[k]) runtime_.ReturnToDeviceIfRoom(chunk, /*async=*/true);  // overlaps chunk k+1's update
    }
  }
  ParallelAdam(kernels_, work, options_.cpu_threads);  // all at once when nothing had to move
  for (auto& copies : staged_copies) {  // the next forward reads the device chunks
    for (auto& t : copies) runtime_.WaitCopy(*t);
  }
}

void HybridAdam::UpdateDeviceChunk(int chunk, double lr, const at::Tensor& unscale) {
  const auto& c = options_.optimizer;
  const auto& store = runtime_.store();
  const bool separate_master = runtime_.compute_dtype() != at::kFloat;
  if (runtime_.grads_in_compute_chunks() || !separate_master) runtime_.PlaceComputeChunk(chunk, Tier::kDevice);
  const at::Tensor& master_payload = store.payload(runtime_.chunk_id(ChunkKind::kMaster, chunk));
  const at::Device device = master_payload.device();
  // Gradients as fp32 on the device: one conversion (or copy) per chunk when needed.
  const at::Tensor& grad_payload = store.payload(runtime_.chunk_id(ChunkKind::kGrad, chunk));
  const at::Tensor grads32 =
      grad_payload.scalar_type() == at::kFloat && grad_payload.device() == device ? grad_payload
                                                                                  : grad_payload.to(device, at::kFloat);
  std::vector<at::Tensor> params[2], grads[2], ms[2], vs[2], steps[2];
  const auto& placements = runtime_.layout().placements();
  for (int i : runtime_.layout().chunks()[chunk].param_indices) {
    if (!runtime_.has_grad(i)) continue;
    const int g = decay_[i] ? 1 : 0;
    params[g].push_back(runtime_.View(ChunkKind::kMaster, i));
    // Shaped like the parameter: the CUDA fused op checks sizes and strides match.
    grads[g].push_back(grads32.narrow(0, placements[i].offset_numel, placements[i].numel).view(params[g].back().sizes()));
    ms[g].push_back(runtime_.View(ChunkKind::kAdamM, i));
    vs[g].push_back(runtime_.View(ChunkKind::kAdamV, i));
    if (!device_steps_[i].defined() || device_steps_[i].device() != device) {
      device_steps_[i] = at::full({}, static_cast<double>(steps_[i]), at::TensorOptions().dtype(at::kFloat).device(device));
    }
    steps[g].push_back(device_steps_[i]);
    ++steps_[i];
  }
  for (int g = 0; g < 2; ++g) {
    if (params[g].empty()) continue;
    at::_foreach_add_(steps[g], 1);  // the fused op reads the step; the caller advances it
    const double wd = g == 1 ? c.weight_decay : 0.0;
    if (c.type == OptimizerType::kAdamW) {
      at::_fused_adamw_(params[g], grads[g], ms[g], vs[g], {}, steps[g], lr, c.betas[0], c.betas[1], wd, c.eps,
                        /*amsgrad=*/false, /*maximize=*/false, unscale, std::nullopt);
    } else {
      at::_fused_adam_(params[g], grads[g], ms[g], vs[g], {}, steps[g], lr, c.betas[0], c.betas[1], wd, c.eps,
                       /*amsgrad=*/false, /*maximize=*/false, unscale, std::nullopt);
    }
  }
  if (separate_master) store.payload(runtime_.chunk_id(ChunkKind::kCompute, chunk)).copy_(master_payload);
}

void HybridAdam::BeginSpeculation(double lr, double loss_scale) {
  TORCH_INTERNAL_ASSERT(speculated_.empty(), "HybridAdam: BeginSpeculation twice in one step");
  speculating_ = options_.speculation_slots > 0 && backoff_left_ == 0;
  if (backoff_left_ > 0) --backoff_left_;
  speculation_lr_ = lr;
  speculation_loss_scale_ = loss_scale;
}

std::vector<std::pair<at::Tensor, at::Tensor>> HybridAdam::BackupPairs(int chunk, const Backup& slot,
                                                                       bool staged) const {
  const auto& store = runtime_.store();
  std::vector<std::pair<at::Tensor, at::Tensor>> pairs;
  auto add = [&](ChunkKind kind, const at::Tensor& backup) {
    const at::Tensor& payload = store.payload(runtime_.chunk_id(kind, chunk));
    TORCH_INTERNAL_ASSERT(backup.numel() >= payload.numel() && backup.scalar_type() == payload.scalar_type(),
                          "HybridAdam: speculation slot too small");
    pairs.emplace_back(backup.narrow(0, 0, payload.numel()), payload);
  };
  add(ChunkKind::kMaster, slot.master);  // the compute chunk in fp32 runs
  add(ChunkKind::kAdamM, slot.m);
  add(ChunkKind::kAdamV, slot.v);
  // The update writes the parameters into the compute slots, over the gradients when
  // they share them: a redo needs both back.
  if (runtime_.compute_dtype() != at::kFloat && !staged) add(ChunkKind::kCompute, slot.compute);
  return pairs;
}

bool HybridAdam::Speculate(int chunk) {
  if (!speculating_ || on_device_[chunk] || !runtime_.owned(chunk)) return false;
  for (const Speculation& s : speculated_) {
    if (s.chunk == chunk) return false;  // once per step
  }
  const auto free = std::find(slot_used_.begin(), slot_used_.end(), false);
  if (free == slot_used_.end()) return false;
  const auto& store = runtime_.store();
  // The compute chunk (gradients in bf16/fp16 runs, the master in fp32 ones) comes to
  // the host first when it sits on a device the CPU kernels cannot read (CUDA, or the
  // simulated tier taking the CUDA path), as the end-of-step pipeline brings it.
  // Unless it only receives the new parameters (bf16/fp16 with fp32 grad chunks, as with
  // accumulation): then they are staged in the slot and copied in by Step, if it stands.
  const int compute_id = runtime_.chunk_id(ChunkKind::kCompute, chunk);
  const bool remote = device_unreadable_ && store.tier(compute_id) == chunkmem::Tier::kDevice;
  const bool staged = remote && compute_receives_params_only_;
  const bool bring = remote && !staged;
  if (bring && runtime_.ComputeCount(chunk) > 0) return false;  // still in use: cannot move now
  for (ChunkKind kind : {ChunkKind::kCompute, ChunkKind::kGrad, ChunkKind::kMaster}) {
    const int id = runtime_.chunk_id(kind, chunk);
    if (!(remote && id == compute_id) && !store.payload(id).is_cpu()) return false;
  }
  at::NoGradGuard no_grad;
  const int slot = static_cast<int>(free - slot_used_.begin());
  slot_used_[slot] = true;
  Speculation s{chunk, slot, {}, staged};
  // The chunk's sum of squares is taken where Step would take it (invariant 2): on a
  // CUDA device, queued on the compute stream now, before the copy (which is ordered
  // after it); on the host, by the worker, before the update overwrites the gradients.
  std::vector<at::Tensor> grads = ChunkGrads(chunk);
  if (!grads.empty() && !grads.front().is_cpu()) {
    for (const auto& g : grads) s.device_sums.push_back(at::linalg_vector_norm(g, 2, {}, false, at::kDouble).square());
  }
  std::shared_ptr<chunkmem::CopyTicket> copy;
  if (bring) {
    copy = runtime_.SendComputeChunkToHost(chunk);  // the worker waits for it, not backward
    if (s.device_sums.empty()) grads = ChunkGrads(chunk);  // now the host payload's
  }
  // Everything the worker touches is resolved here, on the training thread: the
  // payloads to back up, the gradient spans and the kernel work (what Step does with a
  // clip coefficient of 1: grad_scale 1 / loss scale). The runtime keeps the chunk
  // where it is meanwhile. A non-finite gradient is updated too: the step then skips,
  // and the rollback restores what the update wrote.
  std::vector<std::pair<at::Tensor, at::Tensor>> backup = BackupPairs(chunk, slots_[slot], staged);
  std::vector<GradSpan> sum_spans;
  if (s.device_sums.empty()) sum_spans = GradSpans(grads);
  std::vector<AdamWork> work;
  AddChunkWork(chunk, speculation_lr_, 1.0 / speculation_loss_scale_, work, staged ? &slots_[slot].compute : nullptr);
  // Staged: the worker touches neither the compute chunk nor anything that moves, so the
  // runtime stays free to evict or fetch it (Step writes the values wherever it is).
  if (!staged) runtime_.set_busy(chunk, true);
  speculated_.push_back(std::move(s));
  if (bring) brought_to_host_.push_back(chunk);
  slots_[slot].sum_squares = 0.0;
  double* sum_squares = &slots_[slot].sum_squares;  // slots_ never grows after construction
  const CpuAdamKernels kernels = kernels_;
  const int threads = options_.cpu_threads;
  RunOnWorker([copy = std::move(copy), backup = std::move(backup), sum_spans = std::move(sum_spans),
               work = std::move(work), sum_squares, kernels, threads] {
    at::NoGradGuard no_grad;
    if (copy) copy->Wait();
    for (const auto& [to, from] : backup) std::memcpy(to.data_ptr(), from.data_ptr(), from.nbytes());
    if (!sum_spans.empty()) *sum_squares = ParallelSumSquares(kernels, sum_spans, threads);
    ParallelAdam(kernels, work, threads);
  });
  return true;
}

void HybridAdam::ReturnBroughtChunks() {
  // As the end-of-step pipeline does: back where backward left them when they fit now
  // (kept, redone or restored; an undone update was redone on the host, in place).
  for (int chunk : brought_to_host_) runtime_.ReturnToDeviceIfRoom(chunk, /*async=*/true);
  brought_to_host_.clear();
}

void HybridAdam::RollBack(const Speculation& s) {
  for (const auto& [part, payload] : BackupPairs(s.chunk, slots_[s.slot], s.staged)) payload.copy_(part);
  for (int i : runtime_.layout().chunks()[s.chunk].param_indices) {
    if (runtime_.has_grad(i)) --steps_[i];  // UpdateHostChunks counted the update
  }
}

StepReport HybridAdam::Step(double lr, double max_norm, LossScaler& scaler) {
  at::NoGradGuard no_grad;
  WaitSpeculation();  // every speculated update is done before anything reads the chunks
  StepReport r;
  r.loss_scale = scaler.scale();
  const double sum_squares = SumSquares();
  const bool overflow = !std::isfinite(sum_squares);
  r.grad_norm = std::sqrt(sum_squares) / r.loss_scale;
  scaler.Update(overflow);
  // Speculated chunks (Speculate) stand when this step's grad_scale is the one they
  // assumed (clip coefficient 1, the same loss scale) at the same lr; else restored.
  const double clip_coef =
      max_norm > 0 && std::isfinite(max_norm) ? std::min(1.0, max_norm / (r.grad_norm + 1e-6)) : 1.0;
  const double grad_scale = clip_coef / r.loss_scale;
  const bool speculation_stands =
      !overflow && grad_scale == 1.0 / speculation_loss_scale_ && lr == speculation_lr_;
  std::vector<bool> kept(runtime_.layout().num_chunks(), false);
  std::vector<std::shared_ptr<chunkmem::CopyTicket>> staged_copies;
  for (const Speculation& s : speculated_) {
    runtime_.set_busy(s.chunk, false);
    if (speculation_stands) {
      kept[s.chunk] = true;
      ++r.speculated_chunks;
      if (s.staged) CopyStagedIn(s.chunk, slots_[s.slot].compute, staged_copies);
    } else {
      RollBack(s);
      ++r.rolled_back_chunks;
    }
  }
  for (auto& t : staged_copies) runtime_.WaitCopy(*t);  // before the slots are reused
  if (r.rolled_back_chunks > 0) backoff_left_ = options_.speculation_backoff_steps;
  speculated_.clear();
  std::fill(slot_used_.begin(), slot_used_.end(), false);
  speculating_ = false;
  if (overflow) {  // skipped with or without a scaler (fp32/bf16: the caller stops)
    r.skipped = true;
    RestoreComputeFromMaster();
    ClearHostGrads();
    ReturnBroughtChunks();
    return r;
  }
  std::vector<int> host_chunks;
  for (int chunk = 0; chunk < runtime_.layout().num_chunks(); ++chunk) {
    if (!on_device_[chunk] && runtime_.owned(chunk) && !kept[chunk]) host_chunks.push_back(chunk);
  }
  // Device chunks first: on CUDA their fused updates queue on the GPU and run while the
  // CPU kernels update the host chunks, and the host pipeline's send-backs come last, so
  // nothing the device path fetches evicts a chunk just sent back.
  auto t0 = std::chrono::steady_clock::now();
  if (!device_chunks_.empty()) {
    // The fused op divides gradients by its grad_scale: pass 1 / (clip_coef / loss_scale).
    const at::Tensor unscale =
        at::full({}, 1.0 / grad_scale, at::TensorOptions().dtype(at::kFloat).device(runtime_.compute_device()));
    for (int chunk : device_chunks_) UpdateDeviceChunk(chunk, lr, unscale);
  }
  r.device_chunks = static_cast<int>(device_chunks_.size());
  r.device_ms = MsSince(t0);
  t0 = std::chrono::steady_clock::now();
  UpdateHostChunks(host_chunks, lr, grad_scale);
  UpdateHostParams(lr, grad_scale);
  ClearHostGrads();
  ReturnBroughtChunks();
  r.host_ms = MsSince(t0);
  r.host_chunks = static_cast<int>(host_chunks.size()) + r.speculated_chunks;
  return r;
}

}  // namespace ps::optim
