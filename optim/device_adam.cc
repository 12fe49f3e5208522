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
#include "optim/cpu_adam.h"
#include "optim/device_rounding.h"

#ifdef PS_WITH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "optim/device_adam_cuda.h"
#endif

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

#ifdef PS_WITH_CUDA
ElemType ElemTypeOf(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return ElemType::kFp32;
    case at::kHalf: return ElemType::kFp16;
    case at::kBFloat16: return ElemType::kBf16;
    case at::kByte: return ElemType::kInt8;
    default: TORCH_CHECK(false, "DeviceAdam: no fused update for ", t, " payloads");
  }
  return ElemType::kFp32;
}

// Element `offset_numel` of a 1-D payload.
void* At(const at::Tensor& payload, int64_t offset_numel) {
  return static_cast<char*>(payload.data_ptr()) + offset_numel * payload.element_size();
}

// The payloads the fused kernel can take: m and v on the weights' device, both fp32, bf16
// or 8-bit; an fp32 master or bf16 weights; gradients where the chunk says they are.
void CheckFusedPayloads(const DeviceChunk& chunk) {
  const at::Device device = chunk.master.device();
  const at::ScalarType state = chunk.m.scalar_type();
  TORCH_CHECK(chunk.m.device() == device && chunk.v.device() == device && chunk.v.scalar_type() == state &&
                  (state == at::kFloat || state == at::kBFloat16 || state == at::kByte),
              "DeviceAdam: the fused update needs m and v on the weights' device (", device, "), both fp32, bf16 or "
              "8-bit, not ", chunk.m.device(), " ", state, " and ", chunk.v.device(), " ", chunk.v.scalar_type());
  TORCH_CHECK(chunk.master.scalar_type() == at::kFloat || chunk.master.scalar_type() == at::kBFloat16,
              "DeviceAdam: the fused update needs an fp32 master or bf16 weights, not ", chunk.master.scalar_type());
  TORCH_CHECK(chunk.grads_on_device ? chunk.grads.device() == device : chunk.grads.is_cpu(),
              "DeviceAdam: gradients said to be on ", chunk.grads_on_device ? "the device" : "the host", " are on ",
              chunk.grads.device());
}

// A piece's weights and moments in the chunk's payloads (the gradient and the
// hyper-parameters are the caller's).
FusedAdamPiece FusedPayloadsOf(const DeviceChunk& chunk, const SlicePiece& piece) {
  FusedAdamPiece f;
  if (chunk.master.scalar_type() != at::kFloat) {
    f.weights = static_cast<uint16_t*>(At(chunk.master, piece.offset_numel));
  } else {
    f.master = static_cast<float*>(At(chunk.master, piece.offset_numel));
  }
  f.state_type = ElemTypeOf(chunk.m.scalar_type());
  if (Int8(chunk.m)) {  // Int8MomentOf checks the piece starts at a block boundary
    const Int8Moment m = Int8MomentOf(chunk.m, chunk.capacity_numel, piece.offset_numel, piece.numel);
    const Int8Moment v = Int8MomentOf(chunk.v, chunk.capacity_numel, piece.offset_numel, piece.numel);
    f.m = m.codes.data_ptr();
    f.v = v.codes.data_ptr();
    f.m_scale = m.scales.data_ptr<float>();
    f.v_scale = v.scales.data_ptr<float>();
  } else {
    f.m = At(chunk.m, piece.offset_numel);
    f.v = At(chunk.v, piece.offset_numel);
  }
  f.numel = piece.numel;
  f.sr_index = piece.offset_numel;
  return f;
}
#endif

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

void DeviceAdam::Reserve(int64_t capacity_numel, const Needs& wanted, at::Device device) {
  const int64_t numel = std::min(slice_numel_, std::max<int64_t>(capacity_numel, 1));
  Needs needs = wanted;
#ifdef PS_WITH_CUDA
  if (fused_kernel_ && device.is_cuda()) {
    // The fused kernel takes every chunk whose moments or weights are not fp32: it reads
    // them in place, and host gradients cross into the gradient slice. Without a master
    // there is no separate compute chunk, so the compute slice would only stage those.
    needs.moments = false;
    if (needs.master) needs.compute = false;
    needs.master = false;
  }
#endif
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

bool DeviceAdam::Fused(const DeviceChunk& chunk) const {
#ifdef PS_WITH_CUDA
  return fused_kernel_ && chunk.master.is_cuda() &&
         (chunk.m.scalar_type() != at::kFloat || chunk.master.scalar_type() != at::kFloat);
#else
  (void)chunk;
  return false;
#endif
}

#ifdef PS_WITH_CUDA
void DeviceAdam::RunBatchFused(const DeviceChunk& chunk, const std::vector<DeviceParam>& params, const SliceBatch& b,
                               double lr, double grad_scale) {
  CheckFusedPayloads(chunk);
  const at::Device device = chunk.master.device();
  const int64_t n = b.end_numel - b.begin_numel;
  at::Tensor grads = chunk.grads.narrow(0, b.begin_numel, n);
  if (!chunk.grads_on_device) {  // across in their own dtype, into the gradient scratch's bytes
    grads = Scratch(kGrads, at::kFloat, chunk).view(grads.scalar_type()).narrow(0, 0, n).copy_(grads);
  }
  const bool int8 = Int8(chunk.m);
  const auto& c = config_;
  std::vector<FusedAdamPiece> pieces;
  size_t next = 0;  // params are in layout order, as the pieces
  for (const SlicePiece& piece : b.pieces) {
    while (params[next].slice.index != piece.index) ++next;
    const DeviceParam& param = params[next];
    FusedAdamPiece f = FusedPayloadsOf(chunk, piece);
    f.grad = At(grads, piece.offset_numel - b.begin_numel);
    f.grad_type = ElemTypeOf(grads.scalar_type());
    f.sr_seed = param.sr_seed;
    f.hyper = AdamHyper::Make(lr, c.betas[0], c.betas[1], c.eps, param.decay ? c.weight_decay : 0.0,
                              c.type == OptimizerType::kAdamW, param.step_count, grad_scale);
    pieces.push_back(f);
  }
  const c10::cuda::CUDAGuard guard(device);
  FusedAdamCodes codes;  // the tables the ops path uses too (made once per device)
  if (int8) {
    const Int8DeviceCode& m_code = Code(QuantCode::kSigned, device);
    const Int8DeviceCode& v_code = Code(QuantCode::kUnsigned, device);
    codes = {m_code.values.data_ptr<float>(), m_code.thresholds.data_ptr<float>(), v_code.values.data_ptr<float>(),
             v_code.thresholds.data_ptr<float>()};
  }
  const char* error = LaunchFusedAdam(pieces, codes, c10::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(error == nullptr, "DeviceAdam: the fused CUDA update did not start: ", error);
}
#else
void DeviceAdam::RunBatchFused(const DeviceChunk&, const std::vector<DeviceParam>&, const SliceBatch&, double,
                               double) {
  TORCH_CHECK(false, "DeviceAdam: the fused CUDA update needs a --config=cuda build");
}
#endif

void DeviceAdam::Update(const DeviceChunk& chunk, const std::vector<DeviceParam>& params, double lr,
                        double grad_scale, const at::Tensor& unscale) {
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
  const bool fused = Fused(chunk);
  for (const SliceBatch& b : SliceUpdate(slices, max_numel, align)) {
    if (fused) {
      RunBatchFused(chunk, params, b, lr, grad_scale);
    } else {
      RunBatch(chunk, params, b, lr, unscale);
    }
  }
  if (chunk.compute.defined()) WriteCompute(chunk);
}

}  // namespace ps::optim
