// A parameter's 8-bit Adam moment (optimizer.state_dtype int8) inside a chunk's m or v
// payload (chunkmem/state_layout.h: codes, then one fp32 scale per block of capacity),
// and what a checkpoint does with it: packed bytes (its codes, then its scales' bytes:
// exact both ways), or fp32 values (dequantised; quantised back block by block,
// block_quant.h). m uses the signed code, v the unsigned one.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>

#include "optim/block_quant.h"

namespace ps::optim {

struct Int8Moment {
  at::Tensor codes;   // uint8 [numel], a view of the payload
  at::Tensor scales;  // fp32 [ceil(numel / kQuantBlockNumel)], a view of the payload
};

// Parameter at `offset_numel` (a block boundary) with `numel` elements in a chunk of
// `capacity_numel` whose m or v payload is `payload` (uint8, host).
Int8Moment Int8MomentOf(const at::Tensor& payload, int64_t capacity_numel, int64_t offset_numel, int64_t numel);

// Bytes of a packed moment of `numel` elements: codes, then 4 bytes per block.
int64_t PackedInt8Numel(int64_t numel);
// A new uint8 host tensor [PackedInt8Numel]: the codes, then the scales' bytes (copied
// from any device; the checkpoint form of one parameter's moment).
at::Tensor PackInt8(const Int8Moment& moment);
// Writes `packed` (PackedInt8Numel bytes, else c10::Error naming `what`) into `to`.
void UnpackInt8(const at::Tensor& packed, const Int8Moment& to, const std::string& what);
// fp32 values [numel] of packed bytes of `numel` elements.
at::Tensor DequantizePackedInt8(const at::Tensor& packed, int64_t numel, QuantCode code);
// Quantises `values` (any float dtype, numel elements, host) into `to`, block by block.
void QuantizeInt8(const at::Tensor& values, QuantCode code, const Int8Moment& to);

// The device path's versions, in LibTorch ops on the payload's device (CUDA or the
// simulated tier), over whole blocks of a chunk at once. They give the codes and scales
// of DequantizeBlock / QuantizeBlock for finite values: the same product, the same
// largest magnitude and division, and the count of thresholds below each value
// (at::bucketize). A code's tables live on the device (made once per device).
struct Int8DeviceCode {
  at::Tensor values;      // fp32 [256]
  at::Tensor thresholds;  // fp32 [255]: thresholds 1..255
};
Int8DeviceCode MakeInt8DeviceCode(QuantCode code, at::Device device);
// fp32 values of `codes` (uint8, a multiple of kQuantBlockNumel) with one fp32 scale
// per block, written into `out` (fp32, as many elements). Temporaries: 4 bytes per element.
void DequantizeInt8Blocks(const at::Tensor& codes, const at::Tensor& scales, const Int8DeviceCode& code,
                          const at::Tensor& out);
// Quantises `values` (fp32, a multiple of kQuantBlockNumel; overwritten: divided by the
// scales) into `codes` (uint8) and `scales` (fp32, one per block). A block's elements
// past a parameter's end must be 0 in `values`: they do not change its scale.
// Temporaries: 4 bytes per element.
void QuantizeInt8Blocks(const at::Tensor& values, const Int8DeviceCode& code, const at::Tensor& codes,
                        const at::Tensor& scales);

}  // namespace ps::optim
