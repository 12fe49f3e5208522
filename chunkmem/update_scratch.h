// The device memory the optimizer's device update (optim/chunk_adam.h, UpdateOnDevice)
// takes beside the chunks: it runs over a chunk in slices of at most
// kDeviceUpdateSliceNumel elements, with fp32 scratch for the slice's gradients (when
// they are not fp32 on the device), m and v (when they are not fp32), the 8-bit
// (de)quantisers' indices, and the new compute-dtype parameters of a compute chunk that
// is on the host. Slices are at most the chunk's capacity. The scratch is borrowed from
// the device tier (ChunkRuntime::BorrowDevice; the 8-bit indices are LibTorch
// temporaries beside it), and the tier plan keeps the most it can take off the device
// room before it gives optimizer state a place there, so a plan that fits leaves the
// update its scratch.
#pragma once

#include <cstdint>

namespace ps::chunkmem {

// A multiple of the 8-bit state's block (chunkmem/state_layout.h, kStateBlockNumel).
constexpr int64_t kDeviceUpdateSliceNumel = int64_t{1} << 23;

// The scratch of a device update with slices of `slice_numel` elements, per slice
// element: 4 for the gradients (fp32 ones may be on the host; others are converted), 8
// for m and v unless they are fp32 (`state_element_bytes` 4), 4 for the 8-bit
// (de)quantisers' indices (`state_element_bytes` 1), and a compute-dtype slice
// (`compute_element_bytes` 2): the new parameters of a separate compute chunk on the
// host or, without an fp32 master (`master_weights` false), the stage of bf16 grad
// chunks on the host, with 4 more for the widened bf16 weights; plus the stochastic rounding's int64 temporaries (48 bytes per element at their peak,
// over a step of at most 2^20 elements and at most the slice; optim/device_rounding.h;
// LibTorch temporaries beside the borrowed scratch). Those temporaries exist only off
// CUDA (on CUDA one kernel rounds); the plan does not know the device and counts them
// everywhere: 48 MiB of a GPU's room.
constexpr int64_t DeviceUpdateScratchBytes(int64_t slice_numel, int64_t state_element_bytes,
                                           int64_t compute_element_bytes, bool master_weights = true) {
  const int64_t parameters = compute_element_bytes == 4 ? 0 : compute_element_bytes + (master_weights ? 0 : 4);
  const int64_t step = slice_numel < (int64_t{1} << 20) ? slice_numel : int64_t{1} << 20;
  const int64_t rounding = master_weights || compute_element_bytes == 4 ? 0 : 48 * step;
  return slice_numel * (4 + (state_element_bytes != 4 ? 8 : 0) + (state_element_bytes == 1 ? 4 : 0) + parameters) +
         rounding;
}

}  // namespace ps::chunkmem
