// The device update's fused CUDA kernel (device_adam_cuda.cu, compiled by nvcc in
// --config=cuda only): AdamElements and AdamInt8Blocks of optim/cpu_adam_element.h on
// the GPU, the same IEEE operations in the same order (fused multiply-adds, correctly
// rounded division and square root, the same conversions and quantisation), so its
// results equal the CPU kernels' bitwise for finite values (NaN bits and an all-NaN
// block's scale may differ). One pass per element: the weights (fp32
// master, or bf16 weights rounded stochastically), the gradient (fp32, bf16 or fp16) and
// m and v (fp32, bf16, or 8-bit codes with one scale per block of kQuantBlockNumel)
// read and written where they are, with no temporaries. No LibTorch and no CUDA headers
// here: device_adam.cc passes raw device pointers and its current stream.
#pragma once

#include <cstdint>
#include <vector>

#include "optim/cpu_adam.h"

namespace ps::optim {

// One parameter's range (or a part of one) of a chunk, all pointers on the device. As
// AdamSpan: `master` fp32, or null with `weights` bf16 (stochastic rounding with
// SrHash(sr_index + i, sr_seed)); m, v in `state_type` (8-bit: codes, and m_scale /
// v_scale one per block, the range starting at a block boundary).
struct FusedAdamPiece {
  float* master = nullptr;
  uint16_t* weights = nullptr;
  const void* grad = nullptr;
  void* m = nullptr;
  void* v = nullptr;
  float* m_scale = nullptr;
  float* v_scale = nullptr;
  int64_t numel = 0;
  int64_t sr_index = 0;
  uint32_t sr_seed = 0;
  ElemType grad_type = ElemType::kFp32;
  ElemType state_type = ElemType::kFp32;
  AdamHyper hyper;
};

// The 8-bit codes' tables on the device, as optim/int8_moments.h's Int8DeviceCode holds
// them: each code's 256 values and its thresholds 1..255 (255 floats).
struct FusedAdamCodes {
  const float* signed_values = nullptr;
  const float* signed_thresholds = nullptr;
  const float* unsigned_values = nullptr;
  const float* unsigned_thresholds = nullptr;
};

// At most this many pieces per launch (they travel as the kernel's argument).
constexpr int kFusedAdamMaxPieces = 20;

// Launches the kernel on `stream` (a cudaStream_t) over every piece, kFusedAdamMaxPieces
// per launch, one thread block per kQuantBlockNumel elements of a piece; `codes` is read
// by 8-bit state only (null pointers otherwise).
// Returns null, or the CUDA error's text when a launch failed.
const char* LaunchFusedAdam(const std::vector<FusedAdamPiece>& pieces, const FusedAdamCodes& codes, void* stream);

}  // namespace ps::optim
