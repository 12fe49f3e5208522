// How a chunk stores Adam's m and v, in elements and bytes (no tensors: the plan and the
// allocation share it). 8-bit state (optimizer.state_dtype int8, one byte per element):
// an m or v payload holds one code per element of capacity, then one fp32 scale per
// kStateBlockNumel elements of capacity (optim/block_quant.h), the scales' bytes rounded
// up to 64 (the host pool's granule, so the plan's bytes are the pool's). Parameters start at block
// boundaries (the layout aligns them to the block), so parameter p's codes are bytes
// [offset, offset + numel) and its scales those from offset / kStateBlockNumel on.
#pragma once

#include <cstdint>

namespace ps::chunkmem {

constexpr int64_t kStateBlockNumel = 256;

// Bytes after the codes of an 8-bit payload: 4 per block of capacity, rounded up to 64.
inline int64_t StateScaleBytes(int64_t capacity_numel) {
  return (4 * ((capacity_numel + kStateBlockNumel - 1) / kStateBlockNumel) + 63) / 64 * 64;
}

// Bytes of one m or v payload of a chunk of `capacity_numel` elements whose state takes
// `state_element_bytes` (4 fp32, 2 bf16, 1 8-bit codes plus their scales).
inline int64_t StatePayloadBytes(int64_t capacity_numel, int64_t state_element_bytes) {
  if (state_element_bytes != 1) return capacity_numel * state_element_bytes;
  return capacity_numel + StateScaleBytes(capacity_numel);
}

// Parameter offsets in chunks are multiples of this: the 8-bit state's block, else 32
// elements (64 bytes at 2 bytes per element).
inline int64_t ParamAlignNumel(int64_t state_element_bytes) { return state_element_bytes == 1 ? kStateBlockNumel : 32; }

}  // namespace ps::chunkmem
