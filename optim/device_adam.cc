#include "optim/device_adam.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/_fused_adam.h>
#include <ATen/ops/_fused_adamw.h>
#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <limits>
#include <utility>

#include "optim/block_quant.h"
#include "optim/device_rounding.h"

namespace ps::optim {
namespace {

enum Scratch { kGrads = 0, kM = 1, kV = 2, kCompute = 3, kMaster = 4 };

int64_t AlignUp(int64_t n, int64_t a) { return (n + a - 1) / a * a; }

bool Int8(const at::Tensor& payload) { return payload.scalar_type() == at::kByte; }

// Whether a tensor on `actual` is on `wanted`: a device named without an index ("cuda",
// the runtime's compute device) is whichever index its tensors got.
bool OnDevice(at::Device actual, at::Device wanted) {
  return actual.type() == wanted.type() && (!wanted.has_index() || actual.index() == wanted.index());
}

}  // namespace

DeviceAdam::DeviceAdam(const OptimizerConfig& config, int64_t slice_numel, DeviceScratchSource source)
    : config_(config), slice_numel_(slice_numel), source_(std::move(source)) {
  TORCH_CHECK(slice_numel_ > 0 && slice_numel_ % kQuantBlockNumel == 0,
              "DeviceAdam: the slice must be a positive multiple of ", kQuantBlockNumel, " elements");
}

const Int8DeviceCode& DeviceAdam::Code(QuantCode code, at::Device device) {
  if (!codes_device_ || !OnDevice(*codes_device_, device)) {
    codes_[0] = MakeInt8DeviceCode(QuantCode::kSigned, device);
    codes_[1] = MakeInt8DeviceCode(QuantCode::kUnsigned, device);
    codes_device_ = device;
  }
  return *codes_[code == QuantCode::kSigned ? 0 : 1];
}

at::Tensor& DeviceAdam::Take(int which, at::ScalarType dtype, int64_t numel, at::Device device) {
  at::Tensor& s = scratch_[which];
  if (!s.defined() || !OnDevice(s.device(), device) || s.scalar_type() != dtype || s.numel() < numel) {
    Release(s);  // before the new one is taken
    s = source_.borrow ? source_.borrow(numel, dtype) : at::empty({numel}, at::TensorOptions().dtype(dtype).device(device));
    TORCH_INTERNAL_ASSERT(OnDevice(s.device(), device), "DeviceAdam: scratch on ", s.device(), ", wanted on ", device);
  }
  return s;
}

void DeviceAdam::Reserve(int64_t capacity_numel, const Needs& needs, at::Device device) {
  const int64_t numel = std::min(slice_numel_, std::max<int64_t>(capacity_numel, 1));
  if (needs.grads) Take(kGrads, at::kFloat, numel, device);
  if (needs.moments) {
    Take(kM, at::kFloat, numel, device);
    Take(kV, at::kFloat, numel, device);
  }
  if (needs.compute) Take(kCompute, needs.compute_dtype, numel, device);
  if (needs.master) Take(kMaster, at::kFloat, numel, device);
}

at::Tensor& DeviceAdam::Scratch(int which, at::ScalarType dtype, const DeviceChunk& chunk) {
  // A slice, or less for a smaller chunk (the plan counts the same; with 8-bit state
  // capacities are whole blocks, so a batch's rounded length fits). Reserve took it
  // already in a run: taking it here could evict this chunk's payloads under the update.
  return Take(which, dtype, std::min(slice_numel_, std::max<int64_t>(chunk.capacity_numel, 1)), chunk.master.device());
}

at::Tensor DeviceAdam::Widen(const at::Tensor& payload, const DeviceChunk& chunk, const SliceBatch& b,
                             QuantCode code, at::Tensor& scratch) {
  const int64_t n = b.end_numel - b.begin_numel;
  if (payload.scalar_type() == at::kFloat) return payload.narrow(0, b.begin_numel, n);
  if (!Int8(payload)) return scratch.narrow(0, 0, n).copy_(payload.narrow(0, b.begin_numel, n));
  const int64_t whole = AlignUp(n, kQuantBlockNumel);  // within capacity: it is a multiple of the block
  at::Tensor wide = scratch.narrow(0, 0, whole);
  const Int8Moment range = Int8MomentOf(payload, chunk.capacity_numel, b.begin_numel, whole);
  DequantizeInt8Blocks(range.codes, range.scales, Code(code, payload.device()), wide);
  // Elements outside the pieces (alignment gaps) are 0, so quantising back sees each
  // parameter's blocks as the host does (a parameter's last block ends at its end).
  int64_t at = b.begin_numel;
  for (const SlicePiece& p : b.pieces) {
    if (p.offset_numel > at) wide.narrow(0, at - b.begin_numel, p.offset_numel - at).zero_();
    at = p.offset_numel + p.numel;
  }
  if (b.begin_numel + whole > at) wide.narrow(0, at - b.begin_numel, b.begin_numel + whole - at).zero_();
  return wide;
}

at::Tensor DeviceAdam::WidenGrads(const DeviceChunk& chunk, const SliceBatch& b) {
  const int64_t n = b.end_numel - b.begin_numel;
  const at::Tensor grads = chunk.grads.narrow(0, b.begin_numel, n);
  at::Tensor wide = Scratch(kGrads, at::kFloat, chunk).narrow(0, 0, n);
  if (chunk.grads_on_device || grads.scalar_type() == at::kFloat) return wide.copy_(grads);
  // From the host in the compute dtype (no master, so the compute slice is free): across
  // in that dtype, widened on the device (a copy across devices that also converts would
  // go through an fp32 temporary on the host, converted there, and a pageable copy).
  return wide.copy_(Scratch(kCompute, grads.scalar_type(), chunk).narrow(0, 0, n).copy_(grads));
}

void DeviceAdam::Narrow(const at::Tensor& wide, const at::Tensor& payload, const DeviceChunk& chunk,
                        const SliceBatch& b, QuantCode code) {
  const int64_t n = b.end_numel - b.begin_numel;
  if (payload.scalar_type() == at::kFloat) return;  // updated in place
  if (!Int8(payload)) {
    payload.narrow(0, b.begin_numel, n).copy_(wide.narrow(0, 0, n));  // rounded to nearest even
    return;
  }
  const int64_t whole = wide.numel();
  const Int8Moment range = Int8MomentOf(payload, chunk.capacity_numel, b.begin_numel, whole);
  QuantizeInt8Blocks(wide, Code(code, payload.device()), range.codes, range.scales);
}

void DeviceAdam::RunBatch(const DeviceChunk& chunk, const std::vector<DeviceParam>& params, const SliceBatch& b,
                          double lr, const at::Tensor& unscale) {
  const int64_t n = b.end_numel - b.begin_numel;
  const bool grads_direct = chunk.grads.scalar_type() == at::kFloat && chunk.grads_on_device;
  const at::Tensor grads = grads_direct ? chunk.grads.narrow(0, b.begin_numel, n) : WidenGrads(chunk, b);
  const bool wide_state = chunk.m.scalar_type() == at::kFloat;
  const at::Tensor m = Widen(chunk.m, chunk, b, QuantCode::kSigned,
                             wide_state ? scratch_[kM] : Scratch(kM, at::kFloat, chunk));
  const at::Tensor v = Widen(chunk.v, chunk, b, QuantCode::kUnsigned,
                             wide_state ? scratch_[kV] : Scratch(kV, at::kFloat, chunk));
  // Weights without an fp32 master: the batch's bf16 weights widened, updated in fp32.
  const bool bf16_master = chunk.master.scalar_type() != at::kFloat;
  const at::Tensor wide_master =
      bf16_master ? Scratch(kMaster, at::kFloat, chunk).narrow(0, 0, n).copy_(chunk.master.narrow(0, b.begin_numel, n))
                  : at::Tensor();
  std::vector<at::Tensor> p[2], g[2], ms[2], vs[2], steps[2];
  std::vector<uint32_t> seeds;  // [piece] its parameter's rounding seed
  size_t next = 0;  // params are in layout order, as the pieces
  for (const SlicePiece& piece : b.pieces) {
    while (params[next].slice.index != piece.index) ++next;
    const int d = params[next].decay ? 1 : 0;
    const int64_t at = piece.offset_numel - b.begin_numel;
    seeds.push_back(params[next].sr_seed);
    p[d].push_back(bf16_master ? wide_master.narrow(0, at, piece.numel)
                               : chunk.master.narrow(0, piece.offset_numel, piece.numel));
    g[d].push_back(grads.narrow(0, at, piece.numel));
    ms[d].push_back(m.narrow(0, at, piece.numel));
    vs[d].push_back(v.narrow(0, at, piece.numel));
    steps[d].push_back(params[next].step);
  }
  const auto& c = config_;
  for (int d = 0; d < 2; ++d) {
    if (p[d].empty()) continue;
    const double wd = d == 1 ? c.weight_decay : 0.0;
    if (c.type == OptimizerType::kAdamW) {
      at::_fused_adamw_(p[d], g[d], ms[d], vs[d], {}, steps[d], lr, c.betas[0], c.betas[1], wd, c.eps,
                        /*amsgrad=*/false, /*maximize=*/false, unscale, std::nullopt);
    } else {
      at::_fused_adam_(p[d], g[d], ms[d], vs[d], {}, steps[d], lr, c.betas[0], c.betas[1], wd, c.eps,
                       /*amsgrad=*/false, /*maximize=*/false, unscale, std::nullopt);
    }
  }
  Narrow(m, chunk.m, chunk, b, QuantCode::kSigned);
  Narrow(v, chunk.v, chunk, b, QuantCode::kUnsigned);
  if (!bf16_master) return;
  for (size_t k = 0; k < b.pieces.size(); ++k) {  // each element's bits: its offset in the chunk
    const SlicePiece& piece = b.pieces[k];
    StochasticRoundInto(wide_master.narrow(0, piece.offset_numel - b.begin_numel, piece.numel),
                        chunk.master.narrow(0, piece.offset_numel, piece.numel), piece.offset_numel, seeds[k]);
  }
}

void DeviceAdam::WriteCompute(const DeviceChunk& chunk) {
  if (chunk.compute_on_device) {  // one conversion kernel, no temporary
    chunk.compute.narrow(0, 0, chunk.used_numel).copy_(chunk.master.narrow(0, 0, chunk.used_numel));
    return;
  }
  // On the host: converted on the device a slice at a time, then one copy per slice
  // (a conversion across devices would go through an fp32 host copy).
  at::Tensor& buffer = Scratch(kCompute, chunk.compute.scalar_type(), chunk);
  for (int64_t at = 0; at < chunk.used_numel; at += slice_numel_) {
    const int64_t n = std::min(slice_numel_, chunk.used_numel - at);
    chunk.compute.narrow(0, at, n).copy_(buffer.narrow(0, 0, n).copy_(chunk.master.narrow(0, at, n)));
  }
}

void DeviceAdam::Release(at::Tensor& buffer) {
  if (buffer.defined() && source_.give_back) source_.give_back(buffer);
  buffer = at::Tensor();
}

void DeviceAdam::ReleaseScratch() {
  for (at::Tensor& s : scratch_) Release(s);
}

void DeviceAdam::Update(const DeviceChunk& chunk, const std::vector<DeviceParam>& params, double lr,
                        const at::Tensor& unscale) {
  const bool grads_direct = chunk.grads.scalar_type() == at::kFloat && chunk.grads_on_device;
  const bool direct = grads_direct && chunk.m.scalar_type() == at::kFloat;
  std::vector<SliceParam> slices;
  for (const DeviceParam& p : params) slices.push_back(p.slice);
  // Without scratch a batch is a whole run of updated parameters (its length bounded
  // only by the chunk's capacity).
  const int64_t align = Int8(chunk.m) ? kQuantBlockNumel : 1;
  TORCH_CHECK(chunk.capacity_numel % align == 0, "DeviceAdam: 8-bit state needs a capacity of whole blocks, not ",
              chunk.capacity_numel, " elements");
  const int64_t max_numel = direct ? AlignUp(std::max<int64_t>(chunk.capacity_numel, 1), align) : slice_numel_;
  for (const SliceBatch& b : SliceUpdate(slices, max_numel, align)) RunBatch(chunk, params, b, lr, unscale);
  if (chunk.compute.defined()) WriteCompute(chunk);
}

}  // namespace ps::optim
