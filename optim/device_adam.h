// DeviceAdam: Adam/AdamW of one chunk on the compute device (CUDA, or the simulated
// tier in tests), with LibTorch's fused multi-tensor op, in batches of at most a slice
// of elements (optim/device_slices.h) so its temporaries are bounded
// (chunkmem/update_scratch.h counts them in the plan): per batch, the gradients are
// converted to fp32 (unless they are fp32 on the device already), bf16 moments widened
// and 8-bit ones dequantised into fp32 scratch, one fused call per decay group runs over
// the batch's pieces, and the moments go back rounded (bf16) or quantised (8-bit): the
// host kernels' arithmetic (optim/cpu_adam.h). Then the compute chunk is rewritten from
// the master where it is separate (on the device directly; on the host through a
// device-converted slice and one copy per slice). fp32 state with fp32 gradients on the
// device needs no gradient or moment scratch: one batch per run of updated parameters.
// The scratch comes from a DeviceScratchSource (the chunk store's device tier in a run),
// taken by Reserve before the step's updates.
// On CUDA (--config=cuda), a chunk whose moments or weights are not fp32 (bf16 or 8-bit
// state, or no fp32 master) is updated by one fused kernel instead
// (optim/device_adam_cuda.h): the CPU kernels' bits, one pass, no widening scratch; fp32
// state with an fp32 master keeps LibTorch's fused op.
// The kernel's bits equal the CPU kernels' for finite values (a step with non-finite
// gradients is skipped before any update).
// Training thread only.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "optim/device_slices.h"
#include "optim/int8_moments.h"
#include "optim/optim_config.h"

namespace ps::optim {

// One chunk's payloads. m and v: fp32, bf16 or 8-bit (uint8: codes, then one fp32 scale
// per block of capacity; chunkmem/state_layout.h).
struct DeviceChunk {
  // fp32, on the device; or bf16 weights without an fp32 master (the compute chunk,
  // placed on the device), widened into fp32 scratch per batch and stored back with
  // stochastic rounding (DeviceParam::sr_seed; optim/device_rounding.h)
  at::Tensor master;
  at::Tensor grads;    // any float dtype, either tier
  at::Tensor m, v;     // on the device
  at::Tensor compute;  // either tier; undefined when the master is the compute chunk
  // Whether the gradients and the compute chunk are on the device tier (the simulated
  // tier's payloads are host memory: the tier, not the tensor's device, decides).
  bool grads_on_device = true;
  bool compute_on_device = true;
  int64_t capacity_numel = 0;
  int64_t used_numel = 0;  // the compute chunk is rewritten over [0, used_numel)
};

struct DeviceParam {
  SliceParam slice;
  bool decay = false;  // weight decay applies
  at::Tensor step;     // the fused op's fp32 step counter, already advanced (updated parameters)
  int64_t step_count = 0;  // the same count on the host (the CUDA kernel's hyper-parameters)
  uint32_t sr_seed = 0;  // a bf16 master's stochastic rounding (ChunkAdam::RoundingSeed)
};

// Where the scratch comes from and goes back to (the runtime's device tier: counted and
// made room for like a chunk); null functions: plain allocations.
struct DeviceScratchSource {
  std::function<at::Tensor(int64_t numel, at::ScalarType dtype)> borrow;
  std::function<void(at::Tensor& buffer)> give_back;
};

class DeviceAdam {
 public:
  DeviceAdam(const OptimizerConfig& config, int64_t slice_numel, DeviceScratchSource source = {});

  // Updates the parameters of `chunk` marked updated in `params` (layout order).
  // `grad_scale`: the gradients' multiplier (clip coefficient / loss scale); `unscale`:
  // its inverse as a 0-dim fp32 tensor on the device (the fused op divides by it).
  void Update(const DeviceChunk& chunk, const std::vector<DeviceParam>& params, double lr, double grad_scale,
              const at::Tensor& unscale);
  // Rewrites the compute chunk [0, used_numel) from the master (on the device): in one
  // conversion where the compute chunk is on the device too, else through a
  // device-converted slice of scratch and one copy per slice (no fp32 host copy).
  void WriteCompute(const DeviceChunk& chunk);
  // Takes the scratch for chunks of up to `capacity_numel` elements before the step's
  // first Update: taking it from the source may evict chunks (the runtime's device
  // tier), which must not happen while an Update holds a chunk's payloads. Which parts:
  // the gradient slice when some chunk's gradients are not fp32 on the device, m and v
  // when the state is not fp32, the compute slice when a compute chunk may be on the
  // host (the caller decides; after this call, eviction may have put it there) or
  // gradients in the compute dtype on the host cross through it.
  struct Needs {
    bool grads = true;
    bool moments = true;
    bool compute = true;
    at::ScalarType compute_dtype = at::kBFloat16;
    bool master = false;  // bf16 weights without an fp32 master: widened into fp32 scratch
  };
  // On CUDA with the fused kernel only the gradient and compute slices are taken (what
  // the kernel's chunks need of them).
  void Reserve(int64_t capacity_numel, const Needs& needs, at::Device device);
  int64_t slice_numel() const { return slice_numel_; }
  // Off: chunks that would take the fused CUDA kernel take the LibTorch-ops path
  // (tools/bench_device_adam's baseline). On by default.
  void UseFusedKernel(bool on) { fused_kernel_ = on; }
  // Gives the scratch back after the step's last Update (it counts in the source's
  // tier only while the optimizer runs).
  void ReleaseScratch();

 private:
  // A batch's fp32 view of a moment payload: the payload's range (fp32) or the scratch,
  // widened or dequantised; and back.
  at::Tensor Widen(const at::Tensor& payload, const DeviceChunk& chunk, const SliceBatch& b, QuantCode code,
                   at::Tensor& scratch);
  void Narrow(const at::Tensor& wide, const at::Tensor& payload, const DeviceChunk& chunk, const SliceBatch& b,
              QuantCode code);
  // Whether `chunk` takes the fused CUDA kernel (CUDA payloads in a --config=cuda build,
  // moments or weights not fp32).
  bool Fused(const DeviceChunk& chunk) const;
  // A batch's gradients in the fp32 scratch, from either tier.
  at::Tensor WidenGrads(const DeviceChunk& chunk, const SliceBatch& b);
  void RunBatch(const DeviceChunk& chunk, const std::vector<DeviceParam>& params, const SliceBatch& b, double lr,
                const at::Tensor& unscale);
  // The same batch in the fused CUDA kernel (optim/device_adam_cuda.h): the CPU kernels'
  // arithmetic and bits, the payloads read and written in place (gradients on the host
  // staged in their own dtype).
  void RunBatchFused(const DeviceChunk& chunk, const std::vector<DeviceParam>& params, const SliceBatch& b, double lr,
                     double grad_scale);
  const Int8DeviceCode& Code(QuantCode code, at::Device device);
  at::Tensor& Take(int which, at::ScalarType dtype, int64_t numel, at::Device device);
  at::Tensor& Scratch(int which, at::ScalarType dtype, const DeviceChunk& chunk);
  void Release(at::Tensor& buffer);

  OptimizerConfig config_;
  int64_t slice_numel_;
  DeviceScratchSource source_;
  std::optional<Int8DeviceCode> codes_[2];  // [signed, unsigned], on codes_device_
  std::optional<at::Device> codes_device_;
  bool fused_kernel_ = true;
  // fp32 gradients, m, v; compute dtype parameters; fp32 widened bf16 weights (no
  // master): until ReleaseScratch
  at::Tensor scratch_[5];
};

}  // namespace ps::optim
