// ChunkRuntime: the facade the training loop and the model's layer hooks call.
//
// Owns the parameter <-> chunk binding: every managed parameter is an ordinary LibTorch
// leaf whose data points at its slot in a compute-dtype chunk on the device tier while
// it is in kCompute, and at an empty tensor on the compute device otherwise
// (docs/chunkmem.md, invariant 4). Chunk kinds per layout chunk i: compute (params;
// moved between tiers), grad (fp32; none when grads_in_compute_chunks, then kGrad views
// are the compute slots), master (fp32; the compute chunk itself in fp32), Adam m and v
// (RuntimeOptions::state_dtype: fp32, bf16 or 8-bit codes with block scales). Where
// they live (docs/chunkmem.md, "Tier plan"): the TierPlan given in
// RuntimeOptions (decided by the run's memory plan) names the chunks whose master, m
// and v are allocated on the device at start-up and stay there, and those whose master,
// m and v live in the NVMe tier's file (nvme(): mounted on a host slot while in use);
// every other chunk's optimizer state, every grad chunk and every compute chunk start
// on the host. After
// warm-up the GradSink moves the grad chunks of device-updated chunks to the device for
// good, as room allows. Compute chunks move on access: the Residency
// (chunkmem/residency.h: moments, the warm-up trace, budgets, eviction, prefetch, pins)
// is the only code that moves one, for the layer hooks and, through
// optimizer_moves(), for the optimizer's HostPipeline (chunkmem/host_pipeline.h),
// which never reaches the store directly.
// Gradients (docs/chunkmem.md, "Gradients"): the GradSink (chunkmem/grad_sink.h) adds
// them into a grad chunk pinned on the device, or into a device staging slot per chunk
// and micro-batch copied to the host grad chunk, whole, once the chunk's gradients are
// in; with ZeRO, ZeroGroups (chunkmem/zero_groups.h) gathers chunk groups and reduces
// their gradients into the chunks this rank owns.
// Threads: the training thread, and the autograd thread that runs backward (the
// calling thread for CPU tensors; autograd's device thread for CUDA tensors, which
// the training thread waits on inside backward(), so calls never overlap).
#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "chunkmem/chunk_allocation.h"
#include "chunkmem/chunk_store.h"
#include "chunkmem/grad_sink.h"
#include "chunkmem/eviction.h"
#include "chunkmem/layout.h"
#include "chunkmem/memory_probe.h"
#include "chunkmem/nvme_state.h"
#include "chunkmem/optimizer_moves.h"
#include "chunkmem/tier_plan.h"
#include "chunkmem/residency.h"
#include "chunkmem/tensor_state.h"
#include "chunkmem/timeline.h"
#include "chunkmem/zero_groups.h"
#include "comm/communicator.h"

namespace ps::chunkmem {

struct ManagedParam {
  std::string name;
  at::Tensor tensor;             // the model's leaf parameter; no requires_grad: frozen
  std::vector<int> used_by_blocks;
};

struct RuntimeOptions {
  int64_t chunk_numel = 0;                     // 0 = ChooseChunkNumel
  at::ScalarType compute_dtype = at::kFloat;   // kFloat, kBFloat16 or kHalf
  // Adam m and v: kFloat, kBFloat16, or kByte (8-bit codes and block scales:
  // StatePayloadNumel; parameters then aligned to kStateBlockNumel).
  at::ScalarType state_dtype = at::kFloat;
  // Write each gradient into its parameter's compute-dtype slot at its last backward
  // use instead of into fp32 grad chunks (PatrickStar's reuse: 14 bytes/parameter in
  // bf16/fp16). Only safe with one backward per optimizer step and a compute dtype
  // other than fp32 (in fp32 the compute chunk is the master).
  bool grads_in_compute_chunks = false;
  // Weights with an fp32 master when the compute dtype is lower (optimizer.master_weights
  // fp32). false (bf16 only; not with grads_in_compute_chunks): the compute chunk holds
  // the weights' only copy, updated with stochastic rounding, and gradients get chunks of
  // the compute dtype (chunk_allocation.h; ZeRO adds its fp32 reductions into them).
  bool master_weights = true;
  // Moments, trace, budgets, eviction and prefetch (residency.h).
  ResidencySettings residency;
  // The tier plan, decided before the runtime is made (PlanTiers, through the run's
  // memory plan: `--plan` prints the same one): whose optimizer state is on
  // the device for good (optimizer_on_device, one entry per layout chunk), and the
  // device bytes it plans for (warmup_device_bytes with a traced budget,
  // device_optimizer_bytes). The runtime takes it as given and never re-plans it.
  // Default: every chunk's optimizer state on the host (an empty optimizer_on_device).
  TierPlan tiers;
  // Start-up: when set, the runtime writes parameter `index`'s initial
  // values itself, into its slot in the fp32 master chunk (the compute chunk in fp32;
  // a lower compute dtype gets a rounded copy), in parallel over parameters
  // (base::ParallelTasks, so calls run on several threads at once), instead of copying the
  // parameter tensors, whose storage is then never read. `values`: fp32, contiguous,
  // host, the parameter's shape, uninitialised; returns whether it wrote them (false:
  // the runtime zeroes them, e.g. for values a checkpoint provides later).
  std::function<bool(int index, at::Tensor values)> initial_values;
  // One backward for all micro-batches of a step, block-major (the vertical schedule,
  // docs/chunkmem.md "Micro-batch order"): a parameter's gradient may arrive several
  // times in it (once per recomputed micro-batch), so a chunk's staging slot is flushed
  // once backward has moved below every block that uses the chunk (PreBackward of a
  // lower block, or AfterBackward), not when each used parameter has one gradient. Not
  // with ZeRO or grads_in_compute_chunks.
  bool block_major_backward = false;
  // On destruction each parameter gets its values back in a tensor of its own (fp32
  // master, or the frozen compute slot widened: a copy of every chunk, pageable host
  // memory for the host-tier ones); false: empty tensors, for a caller that drops the
  // model with the runtime (the trainer: no second copy of the model at exit).
  bool keep_values_at_exit = true;
  // ZeRO over chunk groups (docs/comm.md): the ranks of a data-parallel run (null: one
  // process without collectives; world size 1: ZeRO over one rank, groups of one chunk,
  // which runs the collectives end to end, distributed.force_collectives). Chunk c is owned by rank c mod p; p consecutive chunks
  // form a group. This rank keeps the compute, grad, master, m and v chunks it owns;
  // a group is all-gathered into one device buffer when a block first uses it and
  // released when a block that does not use it starts; gradients are added into a
  // group-sized fp32 buffer and reduce-scattered (average) into the owned grad chunk
  // once the group's gradients of the micro-batch are in. Needs grads_in_compute_chunks
  // off and chunks of one size. Not owned; every rank must make the same calls.
  // With prefetch_depth > 0, after warm-up, the groups of the next moment are gathered
  // while the current block computes (the trace, the same on every rank, says which).
  comm::Communicator* comm = nullptr;
  // The NVMe tier (docs/chunkmem.md, "NVMe tier"): used when the tier plan puts a
  // chunk's optimizer state there (tiers.optimizer_on_nvme); its directory and ring.
  NvmeSettings nvme;
};


// The residency's counters (residency.h), the gradient sink's (grad_sink.h) and ZeRO's
// (zero_groups.h).
struct RuntimeStats : ResidencyStats, GradSinkStats, ZeroStats {};

class ChunkRuntime {
 public:
  // Copies every parameter's current values into the chunks (compute kind, and the fp32
  // master when the compute dtype is lower), or with options.initial_values writes them
  // there directly, places compute chunks on the host tier and releases the parameters'
  // own storage. `store` must outlive the runtime.
  ChunkRuntime(std::vector<ManagedParam> params, ChunkStore& store, const RuntimeOptions& options);
  // Hands the values back to plain parameters (on the host tier's device) so the model
  // outlives the runtime; never throws (if a payload cannot be read, e.g. a failed copy,
  // the parameters are left empty).
  ~ChunkRuntime();
  ChunkRuntime(const ChunkRuntime&) = delete;
  ChunkRuntime& operator=(const ChunkRuntime&) = delete;

  // Layer-hook events (block ids as in models/layer_hooks.h).
  void PreForward(int block);
  void PostForward(int block);
  void PreBackward(int block);
  // After each backward (micro-batch): parameters still in kCompute (no gradient
  // arrived, e.g. inputs without grad) go to kHoldAfterBwd; open gradient staging slots
  // are flushed and every flush is waited for, so the grad chunks are complete.
  void AfterBackward();
  // After the optimizer step: every parameter back to kHold; ends warm-up tracing.
  void EndIteration();
  // Start of an optimizer step: zeroes the fp32 grad chunks written since the last call.
  // The first call after warm-up pins on the device the grad chunks of the chunks whose
  // optimizer state is there, as far as the room left by the working set allows.
  void ZeroGrads();
  // Bytes of layout chunk `chunk`'s fp32 grad chunk (0 when gradients reuse the compute
  // slots).
  int64_t GradChunkBytes(int chunk) const;

  // The moves of compute chunks and the host buffers the optimizer's updates need
  // (optimizer_moves.h; its HostPipeline is the caller): asked of the Residency, whose
  // pins are the marks of a chunk held for an update on another thread. For the
  // optimizer, between AfterBackward and EndIteration, and for an update ahead of the
  // step during backward (a chunk whose gradients are final).
  OptimizerMoves& optimizer_moves() { return *moves_; }
  // Where the constructor's time went (chunk_allocation.h).
  const StartupSeconds& startup_seconds() const { return startup_seconds_; }
  // Whether chunk `chunk`'s optimizer state is on the device for good (the tier plan
  // given in RuntimeOptions).
  bool optimizer_on_device(int chunk) const { return tiers_.optimizer_on_device.at(chunk); }
  // The NVMe tier, when the tier plan puts some chunk's optimizer state there (null
  // otherwise): such a chunk's master (when separate), m and v are store payloads only
  // while it is mounted (NvmeState::Acquire / NvmeMount).
  NvmeState* nvme() const { return nvme_.get(); }
  bool optimizer_on_nvme(int chunk) const { return nvme_ != nullptr && nvme_->on_nvme(chunk); }
  // fp32 grad-chunk-sized host buffers the gradient path may hold at once (the tier
  // plan reserves them: TierPlanInput::host_scratch_chunks).
  static int64_t HostGradScratchChunks(bool grads_in_compute_chunks) {
    return grads_in_compute_chunks ? 0 : static_cast<int64_t>(GradSink::kMaxFlushesInFlight);
  }
  // The warm-up's results, and restoring them (before the first iteration, same layout;
  // throws c10::Error naming the mismatch otherwise).
  WarmupState SaveWarmup() const { return residency_->SaveWarmup(); }
  void RestoreWarmup(const WarmupState& state) { residency_->RestoreWarmup(state); }
  // True once the warm-up iterations are traced (the trace below is complete).
  bool warmed_up() const { return residency_->warmed_up(); }
  // From the warm-up trace: the most compute-chunk bytes that must be on the device
  // together (the chunks of one moment plus those of the next prefetch_depth moments).
  // What is left of the device budget is the margin for optimizer-state chunks.
  int64_t PeakWorkingSetBytes() const { return residency_->PeakWorkingSetBytes(); }
  // Chunk bytes the device may hold now: the store's budget, or with a traced budget
  // the warm-up share or this moment's traced budget.
  int64_t ChunkBudgetNow() const { return residency_->ChunkBudgetNow(); }
  // The lowest chunk budget over all moments (what chunks that stay on the device for
  // good, like the optimizer's, must fit under).
  int64_t MinChunkBudgetBytes() const { return residency_->MinChunkBudgetBytes(); }
  // While paused (evaluation), accesses neither advance the moment nor enter the trace.
  void set_trace_paused(bool paused) { residency_->set_paused(paused); }
  // Non-model memory of the compute device, read at every moment (not owned; null =
  // none; needed for the traced budget).
  void set_memory_probe(DeviceMemoryProbe* probe) { residency_->set_probe(probe); }
  // Records moves, moments and bytes into `timeline` (nullptr: stop). Not owned.
  void set_timeline(ChunkTimeline* timeline) { residency_->set_timeline(timeline); }

  // Called by the post-accumulate-grad hook of parameter `index` (internal; public for
  // the hook object).
  void OnGradAccumulated(int index);

  // ZeRO: whether this rank holds chunk `chunk`'s data (always, with one process).
  bool owned(int chunk) const { return chunk % world_ == rank_; }
  int world_size() const { return world_; }
  comm::Communicator* comm() const { return zero_ ? options_.comm : nullptr; }
  int64_t param_dim(int index) const { return static_cast<int64_t>(shapes_[index].size()); }
  const std::vector<int64_t>& param_sizes(int index) const { return shapes_[index]; }

  const ChunkLayout& layout() const { return layout_; }
  const std::vector<ManagedParam>& params() const { return params_; }
  const AccessTrace& trace() const { return residency_->trace(); }  // the warm-up's (complete once warmed_up())
  // Expires when the runtime is destroyed: autograd nodes that call back into it
  // (pre_backward.h) check it first.
  std::weak_ptr<const int> lifetime() const { return alive_; }
  // Read-only: payloads and tiers. Moves go through the Residency (the layer hooks,
  // optimizer_moves()).
  const ChunkStore& store() const { return store_; }
  // A host buffer from the store, counted in its host tier for the rest of the run (the
  // optimizer's speculation backups; the plan reserves them: host_backup_chunks).
  at::Tensor BorrowHost(int64_t numel, at::ScalarType dtype) { return store_.Borrow(Tier::kHost, numel, dtype, false); }
  // A device buffer from the store within the device tier's budget (the optimizer's
  // device-update scratch, chunkmem/update_scratch.h): chunks not in use are evicted to
  // make room, and it counts as chunk bytes until GiveBackDevice. A c10::Error when
  // the chunks in use leave no room.
  at::Tensor BorrowDevice(int64_t numel, at::ScalarType dtype);
  void GiveBackDevice(at::Tensor& buffer) { store_.GiveBack(Tier::kDevice, buffer); }
  // Speculation (docs/optim.md, "The overlapped host step"): with final_micro_batch on,
  // `on_grads_final(chunk)` is called once an owned chunk's gradients of the step are
  // complete (the last micro-batch's: all in the compute slots, wherever the compute
  // chunk is; or the slot copies and flushes into a host grad chunk done; or the ZeRO
  // reduction finished), while backward goes on. Not called for an fp32 grad chunk
  // pinned on the device (its optimizer state updates there).
  void set_on_grads_final(std::function<void(int chunk)> callback) { on_grads_final_ = std::move(callback); }
  void set_final_micro_batch(bool final) { final_micro_batch_ = final; }
  // Store id of layout chunk `chunk` of `kind`. kMaster is the compute chunk in fp32;
  // kGrad is the compute chunk when gradients reuse the compute slots. ZeRO: -1 for
  // every kind but kCompute of a chunk this rank does not own.
  int chunk_id(ChunkKind kind, int chunk) const;
  // View of parameter `index` in a chunk of `kind`, shaped like the parameter.
  at::Tensor View(ChunkKind kind, int index) const;
  // Parameter `index` trains nothing (it did not require grad): its chunk is frozen, of
  // the compute kind alone (docs/chunkmem.md, "Frozen chunks"); View of another kind throws.
  bool frozen(int index) const { return layout_.params()[index].frozen; }
  bool frozen_chunk(int chunk) const { return layout_.chunks()[chunk].frozen; }
  // True if parameter `index` received a gradient since the last ZeroGrads().
  bool has_grad(int index) const { return has_grad_[index]; }
  TensorState state(int index) const { return states_[index]; }
  int ComputeCount(int chunk) const { return counts_[chunk][static_cast<int>(TensorState::kCompute)]; }
  RuntimeStats stats() const;
  const Residency& residency() const { return *residency_; }
  at::Device compute_device() const { return store_.device_of(Tier::kDevice); }
  at::ScalarType compute_dtype() const { return options_.compute_dtype; }
  at::ScalarType state_dtype() const { return options_.state_dtype; }
  bool grads_in_compute_chunks() const { return options_.grads_in_compute_chunks; }
  // The fp32 master is a chunk of its own (SeparateMaster); false: kMaster is the compute
  // chunk (fp32, or without a master the compute dtype's weights).
  bool separate_master() const { return SeparateMaster(options_.compute_dtype, options_.master_weights); }

 private:
  void Access(int index);
  void Release(int index, TensorState to);
  void SetState(int index, TensorState to);
  void PlanChunks();                     // the layout, and the given tier plan checked against it (constructor)
  void BindChunk(int chunk);             // its parameters to kHold, their storage released, hooks on
  void MakeResidency();                  // after the payloads exist (constructor)
  // The NVMe tier over the plan's chunks and their values written (constructor).
  void MakeNvme(const ChunkAllocation& request, const ChunkValues& values);
  void MakeGradSink();
  std::string UsersOf(int chunk) const;  // a parameter of `chunk` in use, for errors
  const at::Tensor& ComputePayload(int chunk) const;  // owned: the store's; else the gathered view
  void MakeZeroGroups();
  bool zero() const { return zero_; }

  std::vector<ManagedParam> params_;
  ChunkStore& store_;
  RuntimeOptions options_;
  ChunkLayout layout_;
  TierPlan tiers_;                                 // RuntimeOptions::tiers, one entry per chunk
  StartupSeconds startup_seconds_;                 // measured in the constructor
  std::vector<std::vector<int>> params_of_block_;  // [block] -> param indices
  std::vector<ChunkIds> ids_;                      // [chunk][kind] -> store id
  std::vector<TensorState> states_;                // [param]
  std::vector<std::array<int, kNumTensorStates>> counts_;  // [chunk][state] -> params
  std::vector<bool> has_grad_;                     // [param]
  std::vector<int> frozen_used_above_;             // frozen params, released in PreBackward
  std::vector<std::vector<int64_t>> shapes_;       // [param] -> shape
  std::unique_ptr<Residency> residency_;           // compute chunks' tiers (made in the constructor)
  std::unique_ptr<ResidencyMoves> moves_;          // the optimizer's, over residency_
  std::unique_ptr<GradSink> grads_;                // fp32 gradients into grad chunks (made in the constructor)
  std::unique_ptr<NvmeState> nvme_;                // with NVMe chunks in the tier plan (made in the constructor)
  std::shared_ptr<const int> alive_ = std::make_shared<const int>(0);  // see lifetime()
  // ZeRO.
  int world_ = 1, rank_ = 0;
  bool zero_ = false;  // options.comm given: ZeRO over its ranks
  std::unique_ptr<ZeroGroups> zero_groups_;  // with zero_ (made in the constructor)
  std::function<void(int chunk)> on_grads_final_;
  bool final_micro_batch_ = false;
  void GradsFinal(int chunk);  // calls on_grads_final_ in the final micro-batch
};

}  // namespace ps::chunkmem
