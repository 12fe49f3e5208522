// HybridAdam: the optimizer of the chunk runtime. Adam/AdamW over whole chunks, each
// chunk updated either on the compute device (LibTorch's fused multi-tensor AdamW: one
// call per chunk and decay group) or on the host (our SIMD CPU kernels, all threads).
//
// Which chunks update on the device is not decided here: the run's tier plan
// (chunkmem/tier_plan.h, what `--plan` prints; the runtime's optimizer_on_device) put
// the fp32 master, m and v of the chunks that fit chunk.margin_use_ratio x (device
// chunk room - largest block working set), in layout order, on the device at start-up
// (none with optimizer.hybrid_adam off); those update there, the rest on the host. It
// depends on the layout and the budgets only, so a resumed run has the same chunks.
// Nor does this class move chunks: host updates get theirs through a
// chunkmem::HostPipeline, which makes every move they need through the runtime's
// Residency (to the host one chunk ahead and back, or staged parameters copied in;
// chunkmem/host_pipeline.h); updates ahead of the step (speculation) are run and kept
// or rolled back by a Speculation (optim/speculation.h). This class runs Adam over the
// chunk views it is handed, takes the gradient norm and restores after an overflow.
//
// One step: sums of squares per chunk (one host sync) give the gradient norm and
// the overflow flag: a non-finite sum, or a norm after clipping above
// kMaxUpdateGradNorm (optim/optim_config.h). On overflow the step is skipped (fp16;
// fp32/bf16: the trainer stops, naming the norm), fp32 master/m/v are left
// untouched and the compute-dtype parameters restored from the masters; otherwise the
// loss-scale division and the clipping factor are folded into the update. Weight decay
// applies to parameters with 2 or more dimensions only (not biases or norm weights).
// Parameters that received no gradient are not updated (as LibTorch).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "chunkmem/host_pipeline.h"
#include "chunkmem/runtime.h"
#include "chunkmem/update_scratch.h"
#include "optim/chunk_adam.h"
#include "optim/cpu_adam.h"
#include "optim/host_params.h"
#include "optim/loss_scaler.h"
#include "optim/optim_config.h"
#include "optim/speculation.h"

namespace ps::optim {

struct HybridAdamOptions {
  OptimizerConfig optimizer;
  CpuIsa cpu_isa = CpuIsa::kScalar;  // usually BestCpuIsa()
  int cpu_threads = 1;
  // CPUs the kernel threads are pinned to (CpuAdamKernels::pin_cpus); empty = not pinned.
  std::vector<int> pin_cpus;
  // Host updates of device-resident compute chunks go through the pipeline (to the host
  // one chunk ahead, updated, sent back) also on a simulated device tier, where the CPU
  // kernels could read them in place: tests run the CUDA path's logic this way.
  bool pipeline_simulated = false;
  // The overlapped host step (docs/optim.md, "The overlapped host step"): host chunks
  // that may be updated ahead (Speculate) within one step, each backed up in a slot of
  // 14 bytes (fp32 master, m, v and the compute chunk) per chunk element. 0 = off.
  int speculation_slots = 0;
  // After a step that rolled speculation back (clipped or overflowed), this many steps
  // do not speculate (early training clips often; rollbacks cost a restore and a redo).
  int speculation_backoff_steps = 0;
  // The device update's batch bound in elements (chunkmem/update_scratch.h); a multiple
  // of 256. Tests use small ones to cut parameters.
  int64_t device_slice_numel = chunkmem::kDeviceUpdateSliceNumel;
  // run.seed: the stochastic rounding of weights without an fp32 master (ChunkAdam).
  uint64_t rounding_seed = 0;
};

struct StepReport {
  double grad_norm = 0.0;  // before clipping, loss scale removed; inf/NaN or > kMaxUpdateGradNorm on overflow
  bool skipped = false;    // overflow: nothing was updated
  double loss_scale = 1.0; // the scale these gradients carried
  int device_chunks = 0;   // chunks updated on the compute device this step
  int host_chunks = 0;     // chunks updated by the CPU kernels
  double host_ms = 0.0;    // time in the CPU update
  double device_ms = 0.0;  // time in the device update (CUDA: to queue it; it overlaps the host update)
  int speculated_chunks = 0;   // host chunks updated ahead (Speculate) and kept
  int rolled_back_chunks = 0;  // host chunks updated ahead, restored (clipped or overflow) and redone or skipped
};

class HybridAdam {
 public:
  HybridAdam(chunkmem::ChunkRuntime& runtime, const HybridAdamOptions& options);
  ~HybridAdam();
  HybridAdam(const HybridAdam&) = delete;
  HybridAdam& operator=(const HybridAdam&) = delete;

  // One optimizer step at learning rate `lr`, clipping to `max_norm` (<= 0 or inf: no
  // clipping). Updates `scaler` (fp16). Call between AfterBackward and EndIteration.
  StepReport Step(double lr, double max_norm, LossScaler& scaler);

  // The overlapped host step (docs/optim.md): once the last micro-batch's backward has
  // started, BeginSpeculation(lr, loss scale of this step); then Speculate(c) for a host-
  // updated chunk whose gradients are final updates it at once as Step would with a clip
  // coefficient of 1 (its sum of squares taken first, its state backed up in a slot).
  // Step validates: the same clip coefficient 1 and finite gradients keep the update
  // (bitwise what Step would have done); otherwise the chunk is restored from its slot
  // and redone with the real coefficient, or skipped on overflow. Returns false (and
  // does nothing) without a free slot, for a device-updated chunk, for one whose grad or
  // optimizer chunks are not in host memory, or whose device compute chunk must come
  // to the host but still has parameters in use. A compute chunk that only receives the
  // new parameters (fp32 grad chunks) is not moved: they are staged in the slot and
  // Step writes them in where the chunk is, if the speculation stands. A compute chunk
  // on a CUDA device (the gradients, in bf16/fp16 runs) is sent to the host on the copy
  // engine first by the host pipeline, its sum of squares queued on the device before
  // it (where Step would take it), and it goes back after Step when it fits, as at the
  // end of a step. The copy and work list are started at once; the wait for the copy,
  // the backup, a host sum of squares and the update run on the speculation worker
  // thread while the caller (backward) goes on, the chunk held by the pipeline (pinned:
  // in the runtime's Residency; not moved) until Step has waited for it.
  void BeginSpeculation(double lr, double loss_scale);
  bool Speculate(int chunk);

  // A parameter kept outside the chunks (fp32, host; e.g. CPU embeddings): updated by the
  // CPU kernels in every step with its own m and v; its .grad is read and cleared.
  void AddHostParam(const std::string& name, const at::Tensor& param) { host_params_.Add(name, param); }

  // Chunks whose optimizer state lives (and updates) on the device (the run's tier
  // plan).
  const std::vector<int>& device_chunks() const { return device_chunks_; }
  CpuIsa cpu_isa() const { return kernels_.isa; }

  // Checkpoints (between steps). Updates applied to runtime parameter `index` so far.
  int64_t param_steps(int index) const { return chunk_adam_.steps(index); }
  void set_param_steps(int index, int64_t steps) { chunk_adam_.set_steps(index, steps); }
  // Parameters kept outside the chunks (AddHostParam): live tensors and update counts.
  using HostParamState = HostParams::State;
  std::vector<HostParamState> host_param_states() const { return host_params_.states(); }
  void set_host_param_steps(const std::string& name, int64_t steps) { host_params_.set_steps(name, steps); }

 private:
  double SumSquares();
  // The gradient tensors of `chunk` SumSquares reads (one region when every parameter
  // has a gradient, else one per parameter that has one).
  std::vector<at::Tensor> ChunkGrads(int chunk) const;
  double HostSumSquares(const std::vector<at::Tensor>& grads) const;
  static std::vector<GradSpan> GradSpans(const std::vector<at::Tensor>& grads);
  // Per-tensor sums of squares of gradients on a CUDA device, queued there (the norm's
  // device part).
  static void AddDeviceSumSquares(const std::vector<at::Tensor>& grads, std::vector<at::Tensor>& sums);
  // Whether `chunk`'s grad and optimizer chunks, and its compute chunk unless the
  // pipeline brings or stages it (`access`), are in host memory.
  bool StateInHostMemory(int chunk, chunkmem::HostAccess access) const;
  // The payloads an update of `chunk` writes, in a speculation slot's order.
  std::vector<at::Tensor> UpdatedPayloads(int chunk, bool staged) const;
  // Ends the step's speculation: kept chunks (staged parameters copied in) or rolled
  // back ones (step counts undone); returns which chunks were kept.
  std::vector<bool> FinishSpeculation(bool stands, StepReport& r);
  void UpdateHostChunks(const std::vector<int>& chunks, double lr, double grad_scale);
  void RestoreComputeFromMaster();

  HostParams host_params_;

  chunkmem::ChunkRuntime& runtime_;
  HybridAdamOptions options_;
  CpuAdamKernels kernels_;
  ChunkAdam chunk_adam_;           // the update of one chunk's parameters, host or device
  std::vector<int> device_chunks_;
  std::vector<bool> on_device_;   // [chunk]
  chunkmem::HostPipeline pipeline_;  // every chunk move the updates need
  Speculation speculation_;          // updates ahead of the step (BeginSpeculation .. Step)
};

}  // namespace ps::optim
