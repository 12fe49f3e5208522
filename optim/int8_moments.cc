#include "optim/int8_moments.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>
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
  return at::cat({moment.codes.reshape({-1}), moment.scales.view(at::kByte)});
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

namespace {

// The code's values or its thresholds 1..255 on `device`.
at::Tensor Table(const std::array<float, 256>& table, int64_t from, at::Device device) {
  return at::tensor(c10::ArrayRef<float>(table.data() + from, 256 - from)).to(device);
}

}  // namespace

at::Tensor DequantizeInt8OnDevice(const Int8Moment& moment, QuantCode code) {
  const int64_t numel = moment.codes.numel();
  const at::Tensor values = Table(CodeValues(code), 0, moment.codes.device());
  const at::Tensor scales = moment.scales.repeat_interleave(kQuantBlockNumel).narrow(0, 0, numel);
  return values.index_select(0, moment.codes.reshape({-1}).to(at::kInt)) * scales;
}

void QuantizeInt8OnDevice(const at::Tensor& values, QuantCode code, const Int8Moment& to) {
  const int64_t numel = to.codes.numel(), blocks = Blocks(numel);
  const at::Device device = to.codes.device();
  at::Tensor x = at::zeros({blocks * kQuantBlockNumel}, at::TensorOptions().dtype(at::kFloat).device(device));
  x.narrow(0, 0, numel).copy_(values.reshape({-1}));
  const at::Tensor xb = x.view({blocks, kQuantBlockNumel});
  const at::Tensor scale = xb.abs().amax(1, /*keepdim=*/true);
  const at::Tensor normalised = at::where(scale > 0, xb / scale, at::zeros_like(xb));
  const at::Tensor codes = at::bucketize(normalised, Table(CodeThresholds(code), 1, device), /*out_int32=*/true);
  to.codes.copy_(codes.reshape({-1}).narrow(0, 0, numel).to(at::kByte).view(to.codes.sizes()));
  to.scales.copy_(scale.reshape({-1}));
}

}  // namespace ps::optim
