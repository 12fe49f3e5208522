// ChunkEngine's state by name (engine.h's EngineState): Save, Load, GatherParams, and
// the key of the warm-up trace a checkpoint carries. Frozen parameters (LoRA's base,
// docs/chunkmem.md "Frozen chunks") are saved as their fingerprint, kept on Load when
// the state lacks them.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <c10/util/Exception.h>
#include <spdlog/spdlog.h>

#include <string>
#include <utility>
#include <vector>

#include "trainer/chunk_engine.h"
#include "trainer/config_loader.h"
#include "trainer/engine_state_io.h"

namespace ps::trainer {
namespace {

using chunkmem::ChunkKind;

nlohmann::json WarmupToJson(const chunkmem::WarmupState& w) {
  return {{"iterations", w.iterations},
          {"total_moments", w.total_moments},
          {"chunk_moments", w.chunk_moments},
          {"non_model_peak_bytes", w.non_model_peak_bytes}};
}

chunkmem::WarmupState WarmupFromJson(const nlohmann::json& j) {
  chunkmem::WarmupState w;
  w.iterations = j.at("iterations").get<int64_t>();
  w.total_moments = j.at("total_moments").get<int>();
  w.chunk_moments = j.at("chunk_moments").get<std::vector<std::vector<int>>>();
  w.non_model_peak_bytes = j.at("non_model_peak_bytes").get<std::vector<int64_t>>();
  return w;
}

}  // namespace

std::string ChunkEngine::WarmupKey() const {
  const auto& layout = chunks_.runtime->layout();
  // FNV-1a over the chunk capacities and every parameter's chunk and offset.
  uint64_t hash = 1469598103934665603ULL;
  auto mix = [&](int64_t v) {
    for (int b = 0; b < 8; ++b) {
      hash ^= static_cast<uint64_t>(v >> (8 * b)) & 0xff;
      hash *= 1099511628211ULL;
    }
  };
  for (const auto& chunk : layout.chunks()) {
    mix(chunk.capacity_numel);
    if (chunk.frozen) mix(-1);  // (layouts without frozen chunks keep their keys)
  }
  for (const auto& p : layout.placements()) {
    mix(p.chunk_id);
    mix(p.offset_numel);
  }
  // And what the trace's activations and the optimizer's placement depend on.
  const auto& c = config_;
  const auto& k = c.chunk;
  return fmt::format(
      "layout {:016x}, {} chunks; micro-batch {} x {} tokens; {}; recompute {}; {}; warm-up steps {}; device budget "
      "{}, memory {} x {}, warm-up share {}, {} placement, {} eviction, prefetch {}, margin {}, hybrid {}",
      hash, layout.num_chunks(), c.train.micro_batch_size, c.data.seq_len, optim::ToString(c.precision.dtype),
      c.model.activation_checkpointing, device_.str(), k.warmup_steps, k.device_budget_bytes, k.device_memory_bytes,
      k.device_mem_ratio, k.warmup_device_chunk_ratio, k.placement == chunkmem::PlacementKind::kStatic ? "static" : "dynamic",
      k.eviction == chunkmem::EvictionPolicyKind::kOpt ? "opt" : "lru", k.prefetch_depth, k.margin_use_ratio,
      c.optimizer.hybrid_adam) + AccumulationKey();
}

std::string ChunkEngine::AccumulationKey() const {
  // A step's moments come k times (horizontal) or in another order (vertical).
  const int world = comm_ ? comm_->world_size() : 1;
  return fmt::format(", {} x {}", VerticalAccumulation(config_.train, world) ? "vertical" : "horizontal",
                     GradAccumSteps(config_.train, world));
}

at::Tensor ChunkEngine::GatherAll(ChunkKind kind) const {
  const auto& rt = *chunks_.runtime;
  const int p = comm_->world_size();
  const int64_t n = rt.layout().regular_capacity_numel();
  const bool nccl = comm_->backend() == std::string("nccl");
  at::Tensor all = at::empty({rt.layout().num_chunks() * n}, at::kFloat);
  for (int g = 0; g < rt.layout().num_chunks() / p; ++g) {
    at::Tensor own = rt.store().payload(rt.chunk_id(kind, g * p + comm_->rank()));
    own = nccl ? own.to(device_) : own.cpu();
    at::Tensor group = at::empty({p * n}, own.options());
    comm_->AllGather(group, own)->Wait();
    all.narrow(0, g * p * n, p * n).copy_(group);
  }
  return all;
}

EngineState ChunkEngine::Save() const {
  at::NoGradGuard no_grad;
  const auto& rt = *chunks_.runtime;
  EngineState out;
  const int num_params = static_cast<int>(rt.params().size());
  // ZeRO: this rank's share (the parameters of the chunks it owns), which it writes into
  // its own checkpoint files; the step counts of every parameter (state.json's).
  at::Tensor steps = at::zeros({num_params}, at::kLong);
  std::vector<std::pair<std::string, at::Tensor>> frozen;  // LoRA's base: its fingerprint, not its values
  for (int i = 0; i < num_params; ++i) {
    if (!rt.owned(rt.layout().placements()[i].chunk_id)) continue;
    const std::string& name = rt.params()[i].name;
    if (rt.frozen(i)) {
      frozen.emplace_back(name, rt.View(ChunkKind::kCompute, i));
      continue;
    }
    out.params[name] = rt.View(ChunkKind::kMaster, i);
    out.exp_avg[name] = rt.View(ChunkKind::kAdamM, i);
    out.exp_avg_sq[name] = rt.View(ChunkKind::kAdamV, i);
    steps[i] = chunks_.adam->param_steps(i);
  }
  if (comm_ != nullptr) {
    steps = steps.to(comm_->backend() == std::string("nccl") ? device_ : at::Device(at::kCPU));
    comm_->AllReduce(steps, comm::ReduceOp::kSum)->Wait();
    steps = steps.cpu();
  }
  for (int i = 0; i < num_params; ++i) {
    if (!rt.frozen(i)) out.adam_steps[rt.params()[i].name] = steps[i].item<int64_t>();
  }
  if (!frozen.empty()) out.extra["frozen_fingerprint"] = ValuesFingerprint(frozen);
  const bool first_rank = comm_ == nullptr || comm_->rank() == 0;
  for (const auto& hp : chunks_.adam->host_param_states()) {  // chunk.cpu_embedding: replicated, saved once
    if (!first_rank) break;
    out.params[hp.name] = hp.param.detach();
    out.exp_avg[hp.name] = hp.m;
    out.exp_avg_sq[hp.name] = hp.v;
    out.adam_steps[hp.name] = hp.steps;
  }
  out.extra["loss_scaler"] = optim::LossScaler::Serialize(chunks_.scaler->state());
  out.extra["warmup_key"] = WarmupKey();
  out.extra["warmup"] = WarmupToJson(rt.SaveWarmup());
  return out;
}

models::TensorMap ChunkEngine::GatherParams() const {
  if (comm_ == nullptr) {  // frozen parameters too: their compute slots (any float dtype reads)
    const auto& rt = *chunks_.runtime;
    models::TensorMap out = Save().params;
    for (int i = 0; i < static_cast<int>(rt.params().size()); ++i) {
      if (rt.frozen(i)) out[rt.params()[i].name] = rt.View(ChunkKind::kCompute, i);
    }
    return out;
  }
  at::NoGradGuard no_grad;
  const auto& rt = *chunks_.runtime;
  const int64_t n = rt.layout().regular_capacity_numel();
  const at::Tensor master = GatherAll(ChunkKind::kMaster);
  models::TensorMap out;
  for (int i = 0; i < static_cast<int>(rt.params().size()); ++i) {
    const auto& pl = rt.layout().placements()[i];
    out[rt.params()[i].name] = master.narrow(0, pl.chunk_id * n + pl.offset_numel, pl.numel).view(rt.param_sizes(i));
  }
  for (const auto& hp : chunks_.adam->host_param_states()) out[hp.name] = hp.param.detach();
  return out;
}

void ChunkEngine::Load(const EngineState& state) {
  at::NoGradGuard no_grad;
  auto& rt = *chunks_.runtime;
  std::vector<std::string> names;
  for (const auto& p : rt.params()) names.push_back(p.name);
  for (const auto& hp : chunks_.adam->host_param_states()) names.push_back(hp.name);
  CheckNoUnknownParams(state, names);
  const bool separate_master = rt.compute_dtype() != at::kFloat;
  LoadFrozen(state);
  for (int i = 0; i < static_cast<int>(rt.params().size()); ++i) {
    if (!rt.owned(rt.layout().placements()[i].chunk_id) || rt.frozen(i)) continue;  // ZeRO: its owner loads it
    const at::Tensor master = rt.View(ChunkKind::kMaster, i);
    chunks_.adam->set_param_steps(i, RestoreAdamParam(state, rt.params()[i].name, master, rt.View(ChunkKind::kAdamM, i),
                                                      rt.View(ChunkKind::kAdamV, i)));
    if (separate_master) rt.View(ChunkKind::kCompute, i).copy_(master);  // the compute copy is derived
  }
  for (const auto& hp : chunks_.adam->host_param_states()) {  // chunk.cpu_embedding
    chunks_.adam->set_host_param_steps(hp.name, RestoreAdamParam(state, hp.name, hp.param, hp.m, hp.v));
  }
  if (state.extra.contains("loss_scaler")) {
    chunks_.scaler->Restore(optim::LossScaler::Parse(state.extra.at("loss_scaler").get<std::string>()));
  }
  if (state.extra.contains("warmup")) {
    const std::string saved_key = state.extra.value("warmup_key", std::string());
    if (saved_key == WarmupKey()) {
      rt.RestoreWarmup(WarmupFromJson(state.extra.at("warmup")));
    } else {
      spdlog::warn("the checkpoint's chunk warm-up trace is for another setup ({}; now {}): this run traces its own "
                   "warm-up; its losses match the saving run's to kernel rounding, not bitwise",
                   saved_key, WarmupKey());
    }
  }
}

void ChunkEngine::LoadFrozen(const EngineState& state) {
  const auto& rt = *chunks_.runtime;
  std::vector<std::pair<std::string, at::Tensor>> frozen;
  for (int i = 0; i < static_cast<int>(rt.params().size()); ++i) {
    if (!rt.frozen(i)) continue;
    const std::string& name = rt.params()[i].name;
    const at::Tensor slot = rt.View(ChunkKind::kCompute, i);
    // Written when given (the base from model.init_from), rounded to the compute dtype; else kept.
    if (state.params.count(name) != 0) {
      slot.copy_(StateTensor(state.params, name, slot.sizes(), "parameter", state.params_file));
    }
    frozen.emplace_back(name, slot);
  }
  CheckFrozenFingerprint(state, frozen.empty() ? std::string() : ValuesFingerprint(frozen));
}

}  // namespace ps::trainer
