#include "optim/chunk_adam.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <optional>

#include "optim/block_quant.h"
#include "optim/int8_moments.h"

namespace ps::optim {

using chunkmem::ChunkKind;

ElemType ElemTypeOf(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return ElemType::kFp32;
    case at::kHalf: return ElemType::kFp16;
    case at::kBFloat16: return ElemType::kBf16;
    case at::kByte: return ElemType::kInt8;  // 8-bit Adam state (chunkmem/state_layout.h)
    default: TORCH_CHECK(false, "HybridAdam: unsupported chunk dtype ", t);
  }
}

static_assert(kQuantBlockNumel == chunkmem::kStateBlockNumel, "the kernels' block is the chunks' state block");

void ChunkAdam::SetScales(int chunk, int64_t offset_numel, AdamSpan& span) const {
  const int64_t capacity = runtime_.layout().chunks()[chunk].capacity_numel;
  auto scales = [&](ChunkKind kind) {  // the payload layout's (int8_moments.h): from the parameter's first block
    const at::Tensor& payload = runtime_.store().payload(runtime_.chunk_id(kind, chunk));
    return Int8MomentOf(payload, capacity, offset_numel, /*numel=*/1).scales.data_ptr<float>();
  };
  span.m_scale = scales(ChunkKind::kAdamM);
  span.v_scale = scales(ChunkKind::kAdamV);
}

namespace {

QuantCode CodeOf(ChunkKind kind) { return kind == ChunkKind::kAdamM ? QuantCode::kSigned : QuantCode::kUnsigned; }

}  // namespace

Int8Moment ChunkAdam::Int8MomentOfParam(int chunk, ChunkKind kind, int i) const {
  const auto& pl = runtime_.layout().placements()[i];
  return Int8MomentOf(runtime_.store().payload(runtime_.chunk_id(kind, chunk)),
                      runtime_.layout().chunks()[chunk].capacity_numel, pl.offset_numel, pl.numel);
}

at::Tensor ChunkAdam::Int8Wide(int chunk, ChunkKind kind) const {
  const at::Tensor& payload = runtime_.store().payload(runtime_.chunk_id(kind, chunk));
  at::Tensor wide = at::zeros({runtime_.layout().chunks()[chunk].capacity_numel},
                              at::TensorOptions().dtype(at::kFloat).device(payload.device()));
  for (int i : runtime_.layout().chunks()[chunk].param_indices) {
    if (!runtime_.has_grad(i)) continue;  // not updated: its moments stay as they are
    const auto& pl = runtime_.layout().placements()[i];
    wide.narrow(0, pl.offset_numel, pl.numel).copy_(DequantizeInt8OnDevice(Int8MomentOfParam(chunk, kind, i), CodeOf(kind)));
  }
  return wide;
}

void ChunkAdam::Int8Narrow(int chunk, ChunkKind kind, const at::Tensor& wide) const {
  for (int i : runtime_.layout().chunks()[chunk].param_indices) {
    if (!runtime_.has_grad(i)) continue;
    const auto& pl = runtime_.layout().placements()[i];
    QuantizeInt8OnDevice(wide.narrow(0, pl.offset_numel, pl.numel), CodeOf(kind), Int8MomentOfParam(chunk, kind, i));
  }
}

ChunkAdam::ChunkAdam(const chunkmem::ChunkRuntime& runtime, const OptimizerConfig& config)
    : runtime_(runtime), config_(config) {
  for (int i = 0; i < static_cast<int>(runtime.params().size()); ++i) decay_.push_back(runtime.param_dim(i) >= 2);
  steps_.assign(decay_.size(), 0);
  device_steps_.resize(decay_.size());
}

void ChunkAdam::set_steps(int index, int64_t steps) {
  TORCH_CHECK(steps >= 0, "HybridAdam: negative step count for parameter ", index);
  steps_.at(index) = steps;
  device_steps_.at(index) = at::Tensor();  // the fused op's counter is rebuilt from steps_
}

std::vector<chunkmem::ElementRange> ChunkAdam::AddHostWork(int chunk, double lr, double grad_scale,
                                                             std::vector<AdamWork>& work, const at::Tensor* staging) {
  const auto& c = config_;
  const bool adamw = c.type == OptimizerType::kAdamW;
  const bool separate_master = runtime_.compute_dtype() != at::kFloat;
  std::vector<chunkmem::ElementRange> written;
  for (int i : runtime_.layout().chunks()[chunk].param_indices) {
    if (!runtime_.has_grad(i)) continue;
    const at::Tensor master = runtime_.View(ChunkKind::kMaster, i);
    const at::Tensor grad = runtime_.View(ChunkKind::kGrad, i);
    AdamWork w;
    w.span.master = master.data_ptr<float>();
    const at::Tensor m = runtime_.View(ChunkKind::kAdamM, i);
    w.span.m = m.data_ptr();
    w.span.v = runtime_.View(ChunkKind::kAdamV, i).data_ptr();
    w.span.state_type = ElemTypeOf(m.scalar_type());
    if (w.span.state_type == ElemType::kInt8) SetScales(chunk, runtime_.layout().placements()[i].offset_numel, w.span);
    w.span.grad = grad.data_ptr();
    w.span.grad_type = ElemTypeOf(grad.scalar_type());
    const auto& pl = runtime_.layout().placements()[i];
    written.push_back({pl.offset_numel, pl.numel});
    if (separate_master) {
      const at::Tensor out = staging != nullptr ? staging->narrow(0, pl.offset_numel, pl.numel)
                                                : runtime_.View(ChunkKind::kCompute, i);
      w.span.param_out = out.data_ptr();
      w.span.out_type = ElemTypeOf(out.scalar_type());
    }
    w.span.numel = master.numel();
    w.hyper = AdamHyper::Make(lr, c.betas[0], c.betas[1], c.eps, decay_[i] ? c.weight_decay : 0.0, adamw,
                              ++steps_[i], grad_scale);
    work.push_back(w);
  }
  return written;
}

void ChunkAdam::UndoSteps(int chunk) {
  for (int i : runtime_.layout().chunks()[chunk].param_indices) {
    if (runtime_.has_grad(i)) --steps_[i];  // AddHostWork counted the update
  }
}

void ChunkAdam::UpdateOnDevice(int chunk, double lr, const at::Tensor& unscale) {
  const auto& c = config_;
  const auto& store = runtime_.store();
  const bool separate_master = runtime_.compute_dtype() != at::kFloat;
  const at::Tensor& master_payload = store.payload(runtime_.chunk_id(ChunkKind::kMaster, chunk));
  const at::Device device = master_payload.device();
  // Gradients as fp32 on the device: one conversion (or copy) per chunk when needed.
  const at::Tensor& grad_payload = store.payload(runtime_.chunk_id(ChunkKind::kGrad, chunk));
  const at::Tensor grads32 =
      grad_payload.scalar_type() == at::kFloat && grad_payload.device() == device ? grad_payload
                                                                                  : grad_payload.to(device, at::kFloat);
  // bf16 moments: the fused op runs on fp32 copies, rounded back once after it (the
  // host kernels' contract: fp32 arithmetic, m and v rounded to nearest even on store).
  const at::Tensor& m_payload = store.payload(runtime_.chunk_id(ChunkKind::kAdamM, chunk));
  const at::Tensor& v_payload = store.payload(runtime_.chunk_id(ChunkKind::kAdamV, chunk));
  // 8-bit moments: dequantised per parameter into fp32 chunks, quantised back after it.
  const bool int8 = m_payload.scalar_type() == at::kByte;
  const bool wide_state = m_payload.scalar_type() == at::kFloat;
  const at::Tensor m32 = wide_state ? m_payload : int8 ? Int8Wide(chunk, ChunkKind::kAdamM) : m_payload.to(at::kFloat);
  const at::Tensor v32 = wide_state ? v_payload : int8 ? Int8Wide(chunk, ChunkKind::kAdamV) : v_payload.to(at::kFloat);
  std::vector<at::Tensor> params[2], grads[2], ms[2], vs[2], steps[2];
  const auto& placements = runtime_.layout().placements();
  for (int i : runtime_.layout().chunks()[chunk].param_indices) {
    if (!runtime_.has_grad(i)) continue;
    const int g = decay_[i] ? 1 : 0;
    params[g].push_back(runtime_.View(ChunkKind::kMaster, i));
    // Shaped like the parameter: the CUDA fused op checks sizes and strides match.
    grads[g].push_back(grads32.narrow(0, placements[i].offset_numel, placements[i].numel).view(params[g].back().sizes()));
    ms[g].push_back(m32.narrow(0, placements[i].offset_numel, placements[i].numel).view(params[g].back().sizes()));
    vs[g].push_back(v32.narrow(0, placements[i].offset_numel, placements[i].numel).view(params[g].back().sizes()));
    if (!device_steps_[i].defined() || device_steps_[i].device() != device) {
      device_steps_[i] = at::full({}, static_cast<double>(steps_[i]), at::TensorOptions().dtype(at::kFloat).device(device));
    }
    steps[g].push_back(device_steps_[i]);
    ++steps_[i];
  }
  for (int g = 0; g < 2; ++g) {
    if (params[g].empty()) continue;
    at::_foreach_add_(steps[g], 1);  // the fused op reads the step; the caller advances it
    const double wd = g == 1 ? c.weight_decay : 0.0;
    if (c.type == OptimizerType::kAdamW) {
      at::_fused_adamw_(params[g], grads[g], ms[g], vs[g], {}, steps[g], lr, c.betas[0], c.betas[1], wd, c.eps,
                        /*amsgrad=*/false, /*maximize=*/false, unscale, std::nullopt);
    } else {
      at::_fused_adam_(params[g], grads[g], ms[g], vs[g], {}, steps[g], lr, c.betas[0], c.betas[1], wd, c.eps,
                       /*amsgrad=*/false, /*maximize=*/false, unscale, std::nullopt);
    }
  }
  if (int8) {
    Int8Narrow(chunk, ChunkKind::kAdamM, m32);
    Int8Narrow(chunk, ChunkKind::kAdamV, v32);
  } else if (!wide_state) {
    m_payload.copy_(m32);
    v_payload.copy_(v32);
  }
  if (separate_master) store.payload(runtime_.chunk_id(ChunkKind::kCompute, chunk)).copy_(master_payload);
}

}  // namespace ps::optim
