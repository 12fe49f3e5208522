#include "optim/int8_moments.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <array>
#include <string>

namespace ps::optim {
namespace {

int64_t Blocks(int64_t numel) { return (numel + kQuantBlockNumel - 1) / kQuantBlockNumel; }

}  // namespace

Int8Moment Int8MomentOf(const at::Tensor& payload, int64_t capacity_numel, int64_t offset_numel, int64_t numel) {
  TORCH_CHECK(payload.scalar_type() == at::kByte && offset_numel % kQuantBlockNumel == 0,
              "int8 moments: a byte payload and a block-aligned parameter are needed");
  const int64_t scale_byte = capacity_numel + 4 * (offset_numel / kQuantBlockNumel);
  return {payload.narrow(0, offset_numel, numel), payload.narrow(0, scale_byte, 4 * Blocks(numel)).view(at::kFloat)};
}

int64_t PackedInt8Numel(int64_t numel) { return numel + 4 * Blocks(numel); }

at::Tensor PackInt8(const Int8Moment& moment) {
  const int64_t numel = moment.codes.numel();
  at::Tensor packed = at::empty({PackedInt8Numel(numel)}, at::kByte);
  packed.narrow(0, 0, numel).copy_(moment.codes.reshape({-1}));
  packed.narrow(0, numel, packed.numel() - numel).copy_(moment.scales.view(at::kByte));
  return packed;
}

void UnpackInt8(const at::Tensor& packed, const Int8Moment& to, const std::string& what) {
  const int64_t numel = to.codes.numel();
  TORCH_CHECK(packed.scalar_type() == at::kByte && packed.dim() == 1 && packed.numel() == PackedInt8Numel(numel), what,
              ": 8-bit moments of ", packed.numel(), " bytes, the parameter needs ", PackedInt8Numel(numel));
  to.codes.copy_(packed.narrow(0, 0, numel).view(to.codes.sizes()));
  to.scales.view(at::kByte).copy_(packed.narrow(0, numel, 4 * Blocks(numel)));
}

at::Tensor DequantizePackedInt8(const at::Tensor& packed, int64_t numel, QuantCode code) {
  const at::Tensor bytes = packed.contiguous();
  const at::Tensor scales = bytes.narrow(0, numel, 4 * Blocks(numel)).clone().view(at::kFloat);
  at::Tensor out = at::empty({numel}, at::kFloat);
  for (int64_t b = 0; b < Blocks(numel); ++b) {
    const int64_t b0 = b * kQuantBlockNumel, n = std::min(kQuantBlockNumel, numel - b0);
    DequantizeBlock(bytes.data_ptr<uint8_t>() + b0, n, scales.data_ptr<float>()[b], code, out.data_ptr<float>() + b0);
  }
  return out;
}

void QuantizeInt8(const at::Tensor& values, QuantCode code, const Int8Moment& to) {
  const at::Tensor x = values.to(at::kFloat).contiguous().reshape({-1});
  const int64_t numel = to.codes.numel();
  TORCH_CHECK(x.numel() == numel, "int8 moments: ", x.numel(), " values for ", numel, " elements");
  at::Tensor codes = at::empty({numel}, at::kByte), scales = at::empty({Blocks(numel)}, at::kFloat);
  for (int64_t b = 0; b < Blocks(numel); ++b) {
    const int64_t b0 = b * kQuantBlockNumel, n = std::min(kQuantBlockNumel, numel - b0);
    scales.data_ptr<float>()[b] = QuantizeBlock(x.data_ptr<float>() + b0, n, code, codes.data_ptr<uint8_t>() + b0);
  }
  to.codes.copy_(codes.view(to.codes.sizes()));
  to.scales.copy_(scales);
}

Int8DeviceCode MakeInt8DeviceCode(QuantCode code, at::Device device) {
  auto table = [&](const std::array<float, 256>& t, int64_t from) {
    return at::tensor(c10::ArrayRef<float>(t.data() + from, 256 - from)).to(device);
  };
  return {table(CodeValues(code), 0), table(CodeThresholds(code), 1)};
}

void DequantizeInt8Blocks(const at::Tensor& codes, const at::Tensor& scales, const Int8DeviceCode& code,
                          const at::Tensor& out) {
  const int64_t numel = codes.numel();
  TORCH_CHECK(numel % kQuantBlockNumel == 0 && out.numel() == numel && scales.numel() == numel / kQuantBlockNumel,
              "int8 moments: whole blocks and one scale per block are needed");
  at::Tensor o = out;  // a handle: index_select_out writes the caller's elements
  at::index_select_out(o, code.values, 0, codes.reshape({-1}).to(at::kInt));
  out.view({-1, kQuantBlockNumel}).mul_(scales.view({-1, 1}));
}

void QuantizeInt8Blocks(const at::Tensor& values, const Int8DeviceCode& code, const at::Tensor& codes,
                        const at::Tensor& scales) {
  const int64_t numel = values.numel();
  TORCH_CHECK(numel % kQuantBlockNumel == 0 && codes.numel() == numel && scales.numel() == numel / kQuantBlockNumel,
              "int8 moments: whole blocks and one scale per block are needed");
  const at::Tensor xb = values.view({-1, kQuantBlockNumel});
  // The largest magnitude per block, without a copy of |x|: max(max x, -min x), +0 for
  // an all-zero block (as the host's).
  const at::Tensor scale = at::maximum(xb.amax(1), xb.amin(1).neg()).abs_();
  xb.div_(at::where(scale > 0, scale, at::ones_like(scale)).view({-1, 1}));  // an all-zero block stays zero
  codes.reshape({-1}).copy_(at::bucketize(xb, code.thresholds, /*out_int32=*/true).view({-1}));
  scales.copy_(scale);
}

}  // namespace ps::optim
