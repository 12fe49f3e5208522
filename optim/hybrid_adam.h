// HybridAdam: the optimizer of the chunk runtime. Adam/AdamW over whole chunks, each
// chunk updated either on the compute device (LibTorch's fused multi-tensor AdamW: one
// call per chunk and decay group) or on the host (our SIMD CPU kernels, all threads).
//
// Placement (hybrid): the runtime decides it at start-up (chunkmem/placement.h, the
// function `--plan` calls too): the chunks whose fp32 master, m and v fit
// chunk.margin_use_ratio x (device chunk room - largest block working set), in layout
// order, have that state on the device from the first step and update there; the rest
// update on the host. The choice depends on the layout and the budgets only, so a
// resumed run chooses the same chunks. With hybrid off (RuntimeOptions::placement's
// margin_use_ratio 0) every chunk updates on the host.
// Host updates of chunks whose compute chunk sits on a CUDA device are pipelined: chunk
// k+1 comes to the host while chunk k updates, and chunk k goes back to the device
// (when it fits without evicting) while chunk k+1 updates; copies are asynchronous
// with the store's copy engine (chunk.async_prefetch), synchronous otherwise. A compute
// chunk that only receives the new parameters (fp32 grad chunks, as with accumulation)
// stays on the device: they are written into a host staging buffer and copied in.
//
// One step: sums of squares per chunk (one host sync) give the gradient norm and
// the overflow flag; on overflow (fp16) the step is skipped, fp32 master/m/v are left
// untouched and the compute-dtype parameters restored from the masters; otherwise the
// loss-scale division and the clipping factor are folded into the update. Weight decay
// applies to parameters with 2 or more dimensions only (not biases or norm weights).
// Parameters that received no gradient are not updated (as LibTorch).
#pragma once

#include <ATen/core/Tensor.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "chunkmem/runtime.h"
#include "optim/cpu_adam.h"
#include "optim/loss_scaler.h"
#include "optim/optim_config.h"

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
};

struct StepReport {
  double grad_norm = 0.0;  // before clipping, loss scale removed; inf/NaN on overflow
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
  // Step writes them in where the chunk is, if the speculation stands. A compute chunk on a CUDA device
  // (the gradients, in bf16/fp16 runs) is sent to the host on the copy engine first,
  // its sum of squares queued on the device before it (where Step would take it), and
  // it goes back after Step when it fits, as the end-of-step pipeline does. The copy
  // and work list are started at once; the wait for the copy, the backup, a host sum
  // of squares and the update run on the speculation worker thread while the caller
  // (backward) goes on, the chunk marked busy in the runtime (not moved) until Step has
  // waited for it.
  void BeginSpeculation(double lr, double loss_scale);
  bool Speculate(int chunk);

  // A parameter kept outside the chunks (fp32, host; e.g. CPU embeddings): updated by the
  // CPU kernels in every step with its own m and v; its .grad is read and cleared.
  void AddHostParam(const std::string& name, const at::Tensor& param);

  // Chunks whose optimizer state lives (and updates) on the device (the runtime's
  // start-up placement).
  const std::vector<int>& device_chunks() const { return device_chunks_; }
  CpuIsa cpu_isa() const { return kernels_.isa; }

  // Checkpoints (between steps). Updates applied to runtime parameter `index` so far.
  int64_t param_steps(int index) const { return steps_.at(index); }
  void set_param_steps(int index, int64_t steps);
  // Parameters kept outside the chunks (AddHostParam): live tensors and update counts.
  struct HostParamState {
    std::string name;
    at::Tensor param, m, v;
    int64_t steps = 0;
  };
  std::vector<HostParamState> host_param_states() const;
  void set_host_param_steps(const std::string& name, int64_t steps);

 private:
  double SumSquares();
  // The gradient tensors of `chunk` SumSquares reads (one region when every parameter
  // has a gradient, else one per parameter that has one).
  std::vector<at::Tensor> ChunkGrads(int chunk) const;
  double HostSumSquares(const std::vector<at::Tensor>& grads) const;
  static std::vector<GradSpan> GradSpans(const std::vector<at::Tensor>& grads);
  // Speculation: a slot of the payloads an update writes (master, m, v, compute).
  struct Backup {
    at::Tensor master, m, v, compute;
    double sum_squares = 0.0;  // the host sum the worker took (this slot's job alone until Step)
  };
  struct Speculation {
    int chunk = -1;
    int slot = -1;
    // The chunk's sum of squares when its gradients were on a CUDA device: the per-
    // tensor reductions Step would queue (else the worker's host sum, Backup::sum_squares).
    std::vector<at::Tensor> device_sums;
    // The new parameters went to the slot's compute part (the compute chunk, on the
    // device, only receives them): Step copies them in when the speculation stands.
    bool staged = false;
  };
  // (slot part, payload) for each payload of `chunk` the update writes (the compute
  // chunk too unless `staged`: then the update writes the slot's compute part instead).
  std::vector<std::pair<at::Tensor, at::Tensor>> BackupPairs(int chunk, const Backup& slot, bool staged) const;
  void RollBack(const Speculation& s);
  // Chunks Speculate brought to the host go back to the device when they fit.
  void ReturnBroughtChunks();
  void UpdateHostChunks(const std::vector<int>& chunks, double lr, double grad_scale);
  // The kernel work of `chunk`'s parameters with a gradient (advances their step counts).
  // `staging` (compute dtype, a chunk's capacity): the new parameters are written there,
  // at their offsets in the chunk, instead of into the compute chunk.
  void AddChunkWork(int chunk, double lr, double grad_scale, std::vector<AdamWork>& work,
                    const at::Tensor* staging = nullptr);
  // Copies the parameters `chunk`'s update wrote into `staging` into its compute chunk
  // (one copy per run of adjacent updated parameters; on the device with the copy
  // engine, whose tickets it adds, else at once).
  void CopyStagedIn(int chunk, const at::Tensor& staging,
                          std::vector<std::shared_ptr<chunkmem::CopyTicket>>& tickets);
  // The speculation worker: runs queued jobs in order; WaitSpeculation waits for all and
  // rethrows the first failure.
  void RunOnWorker(std::function<void()> job);
  void WaitSpeculation();
  // `unscale`: 1 / grad_scale as a 0-dim fp32 tensor on the device, as the fused op wants.
  void UpdateDeviceChunk(int chunk, double lr, const at::Tensor& unscale);
  void RestoreComputeFromMaster();
  void UpdateHostParams(double lr, double grad_scale);
  void ClearHostGrads();

  struct HostParam {
    std::string name;
    at::Tensor param, m, v;
    bool decay = false;
    int64_t steps = 0;
  };
  std::vector<HostParam> host_params_;

  chunkmem::ChunkRuntime& runtime_;
  HybridAdamOptions options_;
  CpuAdamKernels kernels_;
  std::vector<bool> decay_;       // [param]
  std::vector<int64_t> steps_;    // [param] updates so far (bias correction)
  std::vector<at::Tensor> device_steps_;  // [param] step counters of the fused op (device chunks)
  std::vector<int> device_chunks_;
  std::vector<bool> on_device_;   // [chunk]
  // The CPU kernels cannot read device-tier chunks (CUDA, or the simulated tier with
  // pipeline_simulated): host updates bring them over, or stage their parameters.
  bool device_unreadable_ = false;
  // bf16/fp16 with fp32 grad chunks: the compute chunk only receives the new parameters.
  bool compute_receives_params_only_ = false;
  int64_t largest_chunk_numel_ = 0;
  // Speculation within the current step (BeginSpeculation .. Step).
  bool speculating_ = false;
  int backoff_left_ = 0;  // steps that still do not speculate (speculation_backoff_steps)
  double speculation_lr_ = 0.0, speculation_loss_scale_ = 1.0;
  std::vector<Backup> slots_;              // [slot], allocated on first use, reused
  std::vector<bool> slot_used_;
  std::vector<Speculation> speculated_;    // in the order they were made
  std::vector<int> brought_to_host_;       // compute chunks Speculate moved off the device
  std::thread worker_;                     // started with the first slot
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  int running_ = 0;                        // jobs taken, not finished
  bool stop_ = false;
  std::exception_ptr failure_;
};

}  // namespace ps::optim
