// The device update's fused CUDA kernel (optim/device_adam_cuda.h), through
// DeviceAdam::Update on CUDA payloads, against the CPU kernels' specification (the
// scalar variant, optim/cpu_adam.h) bitwise: weights (fp32 master, or bf16 rounded
// stochastically), m and v (bf16, or 8-bit codes and scales), for each state dtype,
// gradient dtype and gradient tier, in batches that cut a parameter, with a parameter
// left out of the step untouched, a parameter of more blocks than a launch's thread
// blocks, and a batch of more pieces than one launch takes. Runs on a GPU only (a
// --config=cuda build on the machine of tools/gpu_checks.sh adam_cuda); elsewhere there
// is no kernel to check.
#include <ATen/ATen.h>

#include <cstdint>
#include <cstring>
#include <tuple>
#include <vector>

#include "optim/cpu_adam.h"
#include "optim/device_adam.h"
#include "optim/int8_moments.h"
#include "tests/catch.h"

namespace ps::optim {
namespace {

constexpr double kLr = 3e-3, kGradScale = 0.8;

struct Param {
  int64_t offset, numel;
  bool decay, updated;
  int64_t step;
  uint32_t seed;
};

// A chunk's parameters (block-aligned offsets, for 8-bit state), its capacity and the
// update's slice.
struct Layout {
  const char* name;
  std::vector<Param> params;
  int64_t capacity, slice;
};

// Three parameters, the second cut by 512-element slices, the third left out of the step.
Layout Small() { return {"small", {{0, 700, true, true, 3, 11u}, {768, 1000, false, true, 1, 12u}, {1792, 256, true, false, 0, 13u}}, 2048, 512}; }

// One parameter of more blocks than a launch has thread blocks (4,096): each strides.
Layout Large() { return {"large", {{0, 4608 * 256 - 100, true, true, 2, 21u}}, 4608 * 256, 4608 * 256}; }

// 45 parameters, the eighth left out of the step (which splits the batch): launches of
// 7, 20 and 17 pieces, more than one launch's 20.
Layout Many() {
  Layout l{"many", {}, 45 * 512, 45 * 512};
  for (int i = 0; i < 45; ++i) l.params.push_back({i * 512, 300 + 4 * i, i % 2 == 0, i != 7, 1 + i % 5, 100u + i});
  return l;
}

bool SameBytes(const at::Tensor& a, const at::Tensor& b) {
  const at::Tensor x = a.cpu().contiguous(), y = b.cpu().contiguous();
  return x.nbytes() == y.nbytes() && std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0;
}

ElemType TypeOf(at::ScalarType t) {
  return t == at::kFloat ? ElemType::kFp32 : t == at::kHalf ? ElemType::kFp16 : t == at::kBFloat16 ? ElemType::kBf16 : ElemType::kInt8;
}

// Random values of every magnitude from `spread` decades; the draws in a fixed order.
at::Tensor Spread(int64_t n, double scale, double spread) {
  const at::Tensor base = at::randn({n});
  const at::Tensor magnitude = at::exp(at::randn({n}) * spread);
  return base * magnitude * scale;
}

// A moment payload: fp32/bf16 values, or 8-bit codes then one scale per block (each
// parameter's blocks quantised from random values on the host).
at::Tensor Moment(const Layout& l, at::ScalarType state, bool second) {
  at::Tensor values = Spread(l.capacity, 1e-2, 2);
  if (second) values = values * values;
  if (state != at::kByte) return values.to(state);
  at::Tensor payload = at::zeros({l.capacity + 4 * l.capacity / kQuantBlockNumel}, at::kByte);
  for (const Param& p : l.params) {
    QuantizeInt8(values.narrow(0, p.offset, p.numel), second ? QuantCode::kUnsigned : QuantCode::kSigned,
                 Int8MomentOf(payload, l.capacity, p.offset, p.numel));
  }
  return payload;
}

void* At(const at::Tensor& t, int64_t offset) { return static_cast<char*>(t.data_ptr()) + offset * t.element_size(); }

// The host update of every updated parameter with the scalar kernel.
void HostUpdate(const Layout& l, const at::Tensor& weights, const at::Tensor& grads, const at::Tensor& m,
                const at::Tensor& v, const OptimizerConfig& c) {
  const AdamKernel adam = KernelsFor(CpuIsa::kScalar).adam;
  for (const Param& p : l.params) {
    if (!p.updated) continue;
    AdamSpan s;
    if (weights.scalar_type() == at::kFloat) {
      s.master = static_cast<float*>(At(weights, p.offset));
    } else {
      s.param_out = At(weights, p.offset);
      s.out_type = ElemType::kBf16;
    }
    s.grad = At(grads, p.offset);
    s.grad_type = TypeOf(grads.scalar_type());
    s.state_type = TypeOf(m.scalar_type());
    if (m.scalar_type() == at::kByte) {
      const Int8Moment mm = Int8MomentOf(m, l.capacity, p.offset, p.numel);
      const Int8Moment vm = Int8MomentOf(v, l.capacity, p.offset, p.numel);
      s.m = mm.codes.data_ptr();
      s.v = vm.codes.data_ptr();
      s.m_scale = mm.scales.data_ptr<float>();
      s.v_scale = vm.scales.data_ptr<float>();
    } else {
      s.m = At(m, p.offset);
      s.v = At(v, p.offset);
    }
    s.numel = p.numel;
    s.sr_seed = p.seed;
    s.sr_index = p.offset;
    adam(s, AdamHyper::Make(kLr, c.betas[0], c.betas[1], c.eps, p.decay ? c.weight_decay : 0.0,
                            c.type == OptimizerType::kAdamW, p.step, kGradScale));
  }
}

// DeviceAdam::Update on CUDA payloads against HostUpdate on host copies of the same.
void CheckAgainstHost(const Layout& l, at::ScalarType state, bool bf16_weights, at::ScalarType grad_dtype,
                      bool grads_on_device, OptimizerType type) {
  INFO(l.name << " layout, state " << c10::toString(state) << (bf16_weights ? ", bf16 weights" : ", fp32 master")
               << ", grads " << c10::toString(grad_dtype) << (grads_on_device ? " on the device" : " on the host")
               << (type == OptimizerType::kAdamW ? ", AdamW" : ", Adam"));
  const at::Device cuda(at::kCUDA, 0);
  at::manual_seed(7);
  OptimizerConfig config;
  config.type = type;
  config.weight_decay = 0.1;
  const at::Tensor weights = Spread(l.capacity, 0.05, 0).to(bf16_weights ? at::kBFloat16 : at::kFloat);
  // Finite in fp16 too (|g| < 2 x 10^4): the contract is for finite values.
  at::Tensor grads = Spread(l.capacity, 0.5, 1.5).clamp(-2e4, 2e4).to(grad_dtype);
  grads.narrow(0, 5, 40).zero_();
  const at::Tensor m = Moment(l, state, false);
  const at::Tensor v = Moment(l, state, true);
  DeviceChunk d;
  d.master = weights.to(cuda);
  d.grads = grads_on_device ? grads.to(cuda) : grads.clone();
  d.m = m.to(cuda);
  d.v = v.to(cuda);
  d.grads_on_device = grads_on_device;
  d.capacity_numel = l.capacity;
  d.used_numel = l.capacity;
  std::vector<DeviceParam> params;
  for (size_t i = 0; i < l.params.size(); ++i) {
    const Param& p = l.params[i];
    DeviceParam dp;
    dp.slice = SliceParam{static_cast<int>(i), p.offset, p.numel, p.updated};
    dp.decay = p.decay;
    dp.step = at::full({}, static_cast<double>(p.step), at::TensorOptions().dtype(at::kFloat).device(cuda));
    dp.step_count = p.step;
    dp.sr_seed = p.seed;
    params.push_back(dp);
  }
  DeviceAdam adam(config, l.slice);
  DeviceAdam::Needs needs;
  needs.moments = state != at::kFloat;
  needs.master = bf16_weights;
  adam.Reserve(l.capacity, needs, cuda);
  adam.Update(d, params, kLr, kGradScale,
              at::full({}, 1.0 / kGradScale, at::TensorOptions().dtype(at::kFloat).device(cuda)));
  adam.ReleaseScratch();
  const at::Tensor host_weights = weights.clone(), host_m = m.clone(), host_v = v.clone();
  HostUpdate(l, host_weights, grads, host_m, host_v, config);
  CHECK_FALSE(SameBytes(host_weights, weights));  // the step did something
  CHECK(SameBytes(d.master, host_weights));
  CHECK(SameBytes(d.m, host_m));
  CHECK(SameBytes(d.v, host_v));
  CHECK(SameBytes(d.grads, grads));
}

TEST_CASE("fused CUDA update equals the CPU kernels bit for bit", "[device_adam][device][cuda]") {
  if (!at::hasCUDA()) {  // nothing to compare on a machine without a GPU: said, not passed silently
    WARN("no CUDA device: this case checked nothing (tools/gpu_checks.sh runs it on a GPU)");
    return;
  }
  // {state, bf16 weights without a master, gradient dtype, gradients on the device}
  const std::vector<std::tuple<at::ScalarType, bool, at::ScalarType, bool>> modes = {
      {at::kFloat, true, at::kBFloat16, true},   {at::kBFloat16, false, at::kBFloat16, false},
      {at::kBFloat16, false, at::kFloat, true},  {at::kByte, false, at::kBFloat16, true},
      {at::kByte, false, at::kHalf, false},      {at::kByte, false, at::kHalf, true},
      {at::kByte, false, at::kFloat, false},     {at::kByte, true, at::kBFloat16, false},
      {at::kBFloat16, true, at::kFloat, true}};
  for (const auto& [state, bf16_weights, grad_dtype, on_device] : modes) {
    for (OptimizerType type : {OptimizerType::kAdamW, OptimizerType::kAdam}) {
      CheckAgainstHost(Small(), state, bf16_weights, grad_dtype, on_device, type);
    }
  }
  for (const Layout& l : {Large(), Many()}) {
    CheckAgainstHost(l, at::kByte, false, at::kBFloat16, true, OptimizerType::kAdamW);
    CheckAgainstHost(l, at::kByte, true, at::kBFloat16, false, OptimizerType::kAdamW);
    CheckAgainstHost(l, at::kBFloat16, false, at::kFloat, true, OptimizerType::kAdam);
  }
}

}  // namespace
}  // namespace ps::optim
