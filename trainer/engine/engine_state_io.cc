#include "trainer/engine/engine_state_io.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdio>
#include <tuple>

namespace ps::trainer {

at::Tensor StateTensor(const models::TensorMap& map, const std::string& name, c10::IntArrayRef sizes,
                       const std::string& what, const std::string& file) {
  const std::string where = file.empty() ? std::string("the saved state") : file;
  const auto it = map.find(name);
  TORCH_CHECK(it != map.end(), where, ": ", what, " '", name, "' is missing");
  const at::Tensor& t = it->second;
  TORCH_CHECK(at::isFloatingType(t.scalar_type()), where, ": ", what, " '", name, "' is ", t.scalar_type(),
              ", not floating point");
  TORCH_CHECK(t.sizes() == sizes, where, ": ", what, " '", name, "' has shape ", t.sizes(), ", the model needs ",
              sizes);
  return t.to(at::kFloat);
}

int64_t StateSteps(const EngineState& state, const std::string& name) {
  const auto it = state.adam_steps.find(name);
  return it == state.adam_steps.end() ? 0 : it->second;
}

at::Tensor StateMoment(const EngineState& state, const models::TensorMap& map, const std::string& name,
                  c10::IntArrayRef sizes, const std::string& what, optim::QuantCode code) {
  const auto it = map.find(name);
  if (it == map.end() || it->second.scalar_type() != at::kByte) {
    return StateTensor(map, name, sizes, what, state.optimizer_file);
  }
  int64_t numel = 1;
  for (int64_t s : sizes) numel *= s;
  const std::string where = state.optimizer_file.empty() ? std::string("the saved state") : state.optimizer_file;
  TORCH_CHECK(it->second.dim() == 1 && it->second.numel() == optim::PackedInt8Numel(numel), where, ": ", what, " '",
              name, "' holds ", it->second.numel(), " bytes of 8-bit moments, the model needs ",
              optim::PackedInt8Numel(numel));
  return optim::DequantizePackedInt8(it->second, numel, code).view(sizes);
}

int64_t RestoreAdamParam(const EngineState& state, const std::string& name, const at::Tensor& value,
                         const at::Tensor& m, const at::Tensor& v) {
  value.copy_(StateTensor(state.params, name, value.sizes(), "parameter", state.params_file));
  const int64_t steps = StateSteps(state, name);
  if (steps == 0 && !state.exp_avg.count(name)) {
    m.zero_();
    v.zero_();
    return 0;
  }
  m.copy_(StateMoment(state, state.exp_avg, name, value.sizes(), "optimizer.exp_avg", optim::QuantCode::kSigned));
  v.copy_(StateMoment(state, state.exp_avg_sq, name, value.sizes(), "optimizer.exp_avg_sq", optim::QuantCode::kUnsigned));
  return steps;
}

int64_t RestoreInt8AdamParam(const EngineState& state, const std::string& name, const at::Tensor& value,
                             const optim::Int8Moment& m, const optim::Int8Moment& v) {
  value.copy_(StateTensor(state.params, name, value.sizes(), "parameter", state.params_file));
  const int64_t steps = StateSteps(state, name);
  const bool none = steps == 0 && !state.exp_avg.count(name);
  const std::string where = state.optimizer_file.empty() ? std::string("the saved state") : state.optimizer_file;
  for (const auto& [map, moment, what, code] :
       {std::tuple{&state.exp_avg, &m, "optimizer.exp_avg", optim::QuantCode::kSigned},
        std::tuple{&state.exp_avg_sq, &v, "optimizer.exp_avg_sq", optim::QuantCode::kUnsigned}}) {
    if (none) {
      moment->codes.zero_();  // as at start-up: zero scales, so zero moments
      moment->scales.zero_();
      continue;
    }
    const auto it = map->find(name);
    if (it != map->end() && it->second.scalar_type() == at::kByte) {
      optim::UnpackInt8(it->second, *moment, where + ": " + what + " '" + name + "'");
    } else {
      optim::QuantizeInt8(StateTensor(*map, name, value.sizes(), what, state.optimizer_file), code, *moment);
    }
  }
  return steps;
}

void CheckNoUnknownParams(const EngineState& state, const std::vector<std::string>& known) {
  for (const auto& [name, tensor] : state.params) {
    TORCH_CHECK(std::find(known.begin(), known.end(), name) != known.end(),
                state.params_file.empty() ? std::string("the saved state") : state.params_file, ": parameter '",
                name, "' is not in this model (a checkpoint of another model?)");
  }
}

int64_t FingerprintSampleLength(int64_t numel) {
  constexpr int64_t kHalf = kFingerprintSampleMax / 2;
  if (numel == 0) return 0;
  const int64_t stride = std::max<int64_t>(1, numel / kHalf);
  return std::min(numel, kHalf) + std::min(kHalf, (numel + stride - 1) / stride);
}

at::Tensor FingerprintSample(const at::Tensor& tensor) {
  constexpr int64_t kHalf = kFingerprintSampleMax / 2;
  const at::Tensor flat = tensor.detach().reshape({-1});
  const int64_t n = flat.numel();
  if (n == 0) return at::empty({0}, at::kShort);
  const int64_t stride = std::max<int64_t>(1, n / kHalf);
  const at::Tensor strided = flat.slice(0, 0, n, stride);
  const at::Tensor picked =
      at::cat({flat.narrow(0, 0, std::min(n, kHalf)), strided.narrow(0, 0, std::min(kHalf, strided.numel()))});
  return picked.to(at::kCPU).to(at::kBFloat16).contiguous().view(at::kShort);
}

std::string FingerprintOfSamples(const std::vector<FingerprintEntry>& entries) {
  uint64_t h = 0xCBF29CE484222325ull;
  const auto mix = [&h](const void* data, size_t bytes) {
    const auto* p = static_cast<const uint8_t*>(data);
    for (size_t i = 0; i < bytes; ++i) {
      h ^= p[i];
      h *= 0x100000001B3ull;
    }
  };
  for (const auto& e : entries) {
    mix(e.name.data(), e.name.size() + 1);
    for (const int64_t d : e.sizes) mix(&d, sizeof d);
    if (e.sample.numel() == 0) continue;
    const at::Tensor bits = e.sample.to(at::kShort).contiguous();
    mix(bits.data_ptr(), static_cast<size_t>(bits.numel()) * 2);
  }
  char out[17];
  std::snprintf(out, sizeof out, "%016llx", static_cast<unsigned long long>(h));
  return out;
}

std::string ValuesFingerprint(const std::vector<std::pair<std::string, at::Tensor>>& params) {
  std::vector<FingerprintEntry> entries;
  for (const auto& [name, tensor] : params) entries.push_back({name, tensor.sizes().vec(), FingerprintSample(tensor)});
  return FingerprintOfSamples(entries);
}

void CheckFrozenFingerprint(const EngineState& state, const std::string& now) {
  if (!state.extra.contains("frozen_fingerprint")) return;
  const std::string saved = state.extra.at("frozen_fingerprint").get<std::string>();
  TORCH_CHECK(saved == now, state.params_file.empty() ? std::string("the saved state") : state.params_file,
              ": saved over a frozen base of fingerprint ", saved, ", but this run's base has fingerprint ",
              now.empty() ? std::string("(none: nothing is frozen)") : now,
              " (another model.init_from, or another run.seed for a random base)");
}

}  // namespace ps::trainer
