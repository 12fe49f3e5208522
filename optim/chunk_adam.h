// ChunkAdam: Adam/AdamW over the parameters of one chunk, through the runtime's views of
// its payloads (fp32 master, m and v in fp32 or bf16, gradients, compute copy) wherever
// they are: on the host as work for the CPU kernels (ParallelAdam), on the device as
// LibTorch's fused multi-tensor op (optim/device_adam.h: bounded batches; bf16 moments
// widened before it and rounded after it, 8-bit ones dequantised and quantised: the
// host kernels' arithmetic). Keeps each parameter's update count (bias
// correction) and decay mask (weight decay on parameters of 2 or more dimensions only).
// A parameter without a gradient this step is not updated and its count does not
// advance (as LibTorch). It moves nothing: the caller puts the chunk where the update
// reads it (chunkmem::HostPipeline). Training thread only.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "chunkmem/host_pipeline.h"
#include "chunkmem/runtime.h"
#include "chunkmem/update_scratch.h"
#include "optim/cpu_adam.h"
#include "optim/device_adam.h"
#include "optim/optim_config.h"

namespace ps::optim {

// The kernels' element type of a chunk dtype (fp32, bf16, fp16; c10::Error otherwise).
ElemType ElemTypeOf(at::ScalarType t);

class ChunkAdam {
 public:
  // The runtime outlives this. `device_slice_numel`: the device update's batch bound
  // (chunkmem/update_scratch.h; tests use small ones); `scratch`: where its scratch
  // comes from (the runtime's device tier in a run). `rounding_seed` (run.seed): the
  // stochastic rounding of weights without an fp32 master (RoundingSeed).
  ChunkAdam(const chunkmem::ChunkRuntime& runtime, const OptimizerConfig& config,
            int64_t device_slice_numel = chunkmem::kDeviceUpdateSliceNumel, DeviceScratchSource scratch = {},
            uint64_t rounding_seed = 0);

  // Appends the CPU kernels' work for `chunk`'s parameters with a gradient (their counts
  // advance). The new compute-dtype parameters go into the compute chunk (host memory),
  // or with `staging` (compute dtype, a chunk's capacity) there, at their offsets in the
  // chunk. Without an fp32 master (the runtime's separate_master false in bf16) the
  // kernels read the bf16 weights from the compute chunk and store them stochastically
  // rounded (AdamSpan::sr_seed = RoundingSeed, sr_index = the element's offset in its
  // chunk). Returns the compute-chunk ranges written, ascending.
  std::vector<chunkmem::ElementRange> AddHostWork(int chunk, double lr, double grad_scale, std::vector<AdamWork>& work,
                                                  const at::Tensor* staging = nullptr);
  // Takes back the counts AddHostWork advanced for `chunk` (a rolled-back update).
  void UndoSteps(int chunk);
  // The fused update of `chunk`, whose master, m and v are on the device (gradients
  // and the compute chunk on either tier), in bounded batches (optim/device_adam.h),
  // then the compute chunk rewritten from the master. `grad_scale`: the gradients'
  // multiplier; `unscale`: 1 / grad_scale as a 0-dim fp32 tensor on the device, as
  // LibTorch's fused op wants.
  void UpdateOnDevice(int chunk, double lr, double grad_scale, const at::Tensor& unscale);
  // After an overflow (fp16): `chunk`'s compute chunk rewritten from its fp32 master
  // (the gradients in its slots dropped), wherever the two are, a slice at a time
  // across tiers; call EndDeviceUpdates after the last one.
  void RestoreCompute(int chunk);
  // Before the step's first UpdateOnDevice of `chunks`: takes the device update's
  // scratch (which may evict chunks not in use).
  void BeginDeviceUpdates(const std::vector<int>& chunks);
  // After the step's last UpdateOnDevice: frees the device update's scratch.
  void EndDeviceUpdates() { device_adam_.ReleaseScratch(); }

  int64_t steps(int index) const { return steps_.at(index); }
  // The stochastic rounding's seed of update `step` of `chunk`'s parameters: a hash of
  // the run's seed, the chunk and the step, so a resumed run rounds as the uninterrupted
  // one and no two updates of an element share their random bits.
  uint32_t RoundingSeed(int chunk, int64_t step) const;
  void set_steps(int index, int64_t steps);

 private:
  // `chunk`'s payloads for the device update, with the tiers of its gradients and compute chunk.
  DeviceChunk DeviceChunkOf(int chunk) const;
  bool OnDeviceTier(chunkmem::ChunkKind kind, int chunk) const;
  // int8 state: the m and v block scales of the parameter at `offset_numel` in `chunk`.
  void SetScales(int chunk, int64_t offset_numel, AdamSpan& span) const;
  const chunkmem::ChunkRuntime& runtime_;
  OptimizerConfig config_;
  std::vector<bool> decay_;               // [param]
  std::vector<int64_t> steps_;            // [param] updates so far (bias correction)
  std::vector<at::Tensor> device_steps_;  // [param] step counters of the fused op (device chunks)
  uint64_t rounding_seed_ = 0;
  DeviceAdam device_adam_;
};

}  // namespace ps::optim
