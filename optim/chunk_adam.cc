#include "optim/chunk_adam.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/_foreach_add.h>
#include <ATen/ops/full.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <utility>

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

// bf16 weights without an fp32 master: kMaster is the bf16 compute chunk, stored with
// stochastic rounding (the update's one difference from an fp32 run).
static bool WeightsWithoutMaster(const chunkmem::ChunkRuntime& runtime) {
  return runtime.compute_dtype() != at::kFloat && !runtime.separate_master();
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

ChunkAdam::ChunkAdam(const chunkmem::ChunkRuntime& runtime, const OptimizerConfig& config, int64_t device_slice_numel,
                     DeviceScratchSource scratch, uint64_t rounding_seed)
    : runtime_(runtime),
      config_(config),
      rounding_seed_(rounding_seed),
      device_adam_(config, device_slice_numel, std::move(scratch)) {
  for (int i = 0; i < static_cast<int>(runtime.params().size()); ++i) decay_.push_back(runtime.param_dim(i) >= 2);
  steps_.assign(decay_.size(), 0);
  device_steps_.resize(decay_.size());
}

uint32_t ChunkAdam::RoundingSeed(int chunk, int64_t step) const {
  const uint32_t run = static_cast<uint32_t>(rounding_seed_) ^ static_cast<uint32_t>(rounding_seed_ >> 32);
  return SrHash(static_cast<uint32_t>(step), SrHash(static_cast<uint32_t>(chunk), run));
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
  const bool separate_master = runtime_.separate_master();
  const bool no_master = WeightsWithoutMaster(runtime_);
  std::vector<chunkmem::ElementRange> written;
  for (int i : runtime_.layout().chunks()[chunk].param_indices) {
    if (!runtime_.has_grad(i)) continue;
    const at::Tensor master = runtime_.View(ChunkKind::kMaster, i);
    const at::Tensor grad = runtime_.View(ChunkKind::kGrad, i);
    const auto& pl = runtime_.layout().placements()[i];
    const int64_t step = ++steps_[i];
    AdamWork w;
    if (no_master) {  // read from and stored into the compute chunk, stochastically rounded
      w.span.param_out = master.data_ptr();
      w.span.out_type = ElemTypeOf(master.scalar_type());
      w.span.sr_seed = RoundingSeed(chunk, step);
      w.span.sr_index = pl.offset_numel;
    } else {
      w.span.master = master.data_ptr<float>();
    }
    const at::Tensor m = runtime_.View(ChunkKind::kAdamM, i);
    w.span.m = m.data_ptr();
    w.span.v = runtime_.View(ChunkKind::kAdamV, i).data_ptr();
    w.span.state_type = ElemTypeOf(m.scalar_type());
    if (w.span.state_type == ElemType::kInt8) SetScales(chunk, runtime_.layout().placements()[i].offset_numel, w.span);
    w.span.grad = grad.data_ptr();
    w.span.grad_type = ElemTypeOf(grad.scalar_type());
    written.push_back({pl.offset_numel, pl.numel});
    if (separate_master) {
      const at::Tensor out = staging != nullptr ? staging->narrow(0, pl.offset_numel, pl.numel)
                                                : runtime_.View(ChunkKind::kCompute, i);
      w.span.param_out = out.data_ptr();
      w.span.out_type = ElemTypeOf(out.scalar_type());
    }
    w.span.numel = master.numel();
    w.hyper = AdamHyper::Make(lr, c.betas[0], c.betas[1], c.eps, decay_[i] ? c.weight_decay : 0.0, adamw, step,
                              grad_scale);
    work.push_back(w);
  }
  return written;
}

void ChunkAdam::UndoSteps(int chunk) {
  for (int i : runtime_.layout().chunks()[chunk].param_indices) {
    if (runtime_.has_grad(i)) --steps_[i];  // AddHostWork counted the update
  }
}

DeviceChunk ChunkAdam::DeviceChunkOf(int chunk) const {
  const auto& store = runtime_.store();
  const auto& spec = runtime_.layout().chunks()[chunk];
  auto payload = [&](ChunkKind kind) { return store.payload(runtime_.chunk_id(kind, chunk)); };
  DeviceChunk d;
  d.master = payload(ChunkKind::kMaster);
  d.grads = payload(ChunkKind::kGrad);
  d.m = payload(ChunkKind::kAdamM);
  d.v = payload(ChunkKind::kAdamV);
  if (runtime_.separate_master()) d.compute = payload(ChunkKind::kCompute);
  d.grads_on_device = OnDeviceTier(ChunkKind::kGrad, chunk);
  d.compute_on_device = OnDeviceTier(ChunkKind::kCompute, chunk);
  d.capacity_numel = spec.capacity_numel;
  d.used_numel = spec.used_numel;
  return d;
}

bool ChunkAdam::OnDeviceTier(ChunkKind kind, int chunk) const {
  return runtime_.store().tier(runtime_.chunk_id(kind, chunk)) == chunkmem::Tier::kDevice;
}

void ChunkAdam::RestoreCompute(int chunk) {
  const DeviceChunk d = DeviceChunkOf(chunk);
  if (OnDeviceTier(ChunkKind::kMaster, chunk)) {
    device_adam_.WriteCompute(d);  // one conversion, or device-converted slices to the host
  } else if (!d.compute_on_device) {
    d.compute.narrow(0, 0, d.used_numel).copy_(d.master.narrow(0, 0, d.used_numel));
  } else {  // host master, device compute: converted on the host a slice at a time
    const int64_t slice = device_adam_.slice_numel();
    for (int64_t at = 0; at < d.used_numel; at += slice) {
      const int64_t n = std::min(slice, d.used_numel - at);
      d.compute.narrow(0, at, n).copy_(d.master.narrow(0, at, n).to(d.compute.scalar_type()));
    }
  }
}

void ChunkAdam::BeginDeviceUpdates(const std::vector<int>& chunks) {
  const auto& store = runtime_.store();
  int64_t capacity = 0;
  DeviceAdam::Needs needs;
  needs.grads = false;
  bool grad_stage = false;  // narrower gradients on the host, staged in the compute slice
  for (int c : chunks) {
    capacity = std::max(capacity, runtime_.layout().chunks()[c].capacity_numel);
    // Gradient chunks do not move during the step (the residency moves compute chunks).
    const int grad_id = runtime_.chunk_id(ChunkKind::kGrad, c);
    const at::ScalarType grad_dtype = store.payload(grad_id).scalar_type();
    const bool grads_on_host = store.tier(grad_id) != chunkmem::Tier::kDevice;
    needs.grads = needs.grads || grad_dtype != at::kFloat || grads_on_host;
    // (Gradients in the compute chunks reach the device with them: PlaceOnDevice.)
    grad_stage = grad_stage || (grads_on_host && grad_dtype != at::kFloat && !runtime_.grads_in_compute_chunks());
  }
  if (capacity == 0) return;
  needs.moments = runtime_.state_dtype() != at::kFloat;
  // The compute chunk is separate (not the fp32 master) and not placed on the device by
  // the step (it is when it holds the gradients): it may be on the host. Or gradients
  // in the compute dtype (no master) cross through the same slice.
  needs.compute = (runtime_.separate_master() && !runtime_.grads_in_compute_chunks()) || grad_stage;
  needs.compute_dtype = runtime_.compute_dtype();
  needs.master = WeightsWithoutMaster(runtime_);
  device_adam_.Reserve(capacity, needs, runtime_.compute_device());
}

void ChunkAdam::UpdateOnDevice(int chunk, double lr, double grad_scale, const at::Tensor& unscale) {
  const auto& spec = runtime_.layout().chunks()[chunk];
  const DeviceChunk d = DeviceChunkOf(chunk);
  const at::Device device = d.master.device();
  std::vector<DeviceParam> params;
  std::vector<at::Tensor> advanced;
  for (int i : spec.param_indices) {
    const auto& pl = runtime_.layout().placements()[i];
    DeviceParam p;
    p.slice = SliceParam{i, pl.offset_numel, pl.numel, runtime_.has_grad(i)};
    p.decay = decay_[i];
    if (p.slice.updated) {
      if (!device_steps_[i].defined() || device_steps_[i].device() != device) {
        device_steps_[i] = at::full({}, static_cast<double>(steps_[i]), at::TensorOptions().dtype(at::kFloat).device(device));
      }
      p.step = device_steps_[i];
      advanced.push_back(p.step);
      p.sr_seed = RoundingSeed(chunk, ++steps_[i]);
      p.step_count = steps_[i];
    }
    params.push_back(std::move(p));
  }
  if (advanced.empty()) return;
  at::_foreach_add_(advanced, 1);  // the fused op reads the step; the caller advances it
  device_adam_.Update(d, params, lr, grad_scale, unscale);
}

}  // namespace ps::optim
