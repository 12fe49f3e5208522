// ChunkEngine's state by name (engine.h's EngineState): Save, Load, GatherParams, and
// the key of the warm-up trace a checkpoint carries. Frozen parameters (LoRA's base,
// docs/chunkmem.md "Frozen chunks") are saved as their fingerprint, kept on Load when
// the state lacks them.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <c10/util/Exception.h>
#include <c10/util/accumulate.h>
#include <spdlog/spdlog.h>

#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "trainer/config/config_loader.h"
#include "trainer/engine/chunk_engine.h"
#include "trainer/engine/engine_state_io.h"

namespace ps::trainer {
namespace {

using chunkmem::ChunkKind;

// Where `comm`'s collectives take their tensors: `device` for NCCL (device tensors only),
// else the host.
at::Device CollectiveDevice(const comm::Communicator& comm, at::Device device) {
  return comm.backend() == std::string("nccl") ? device : at::Device(at::kCPU);
}

// `t` summed over the ranks of `comm` (null: this process alone), on the host. Collective.
at::Tensor SumOverRanks(comm::Communicator* comm, at::Tensor t, at::Device device) {
  if (comm == nullptr) return t;
  t = t.to(CollectiveDevice(*comm, device));
  comm->AllReduce(t, comm::ReduceOp::kSum)->Wait();
  return t.cpu();
}

// Keeps the chunk whose optimizer state is read or written mounted when that state is
// on the NVMe tier (docs/chunkmem.md, "NVMe tier"): one chunk at a time, switched when
// the parameters reach another chunk; `written` writes each back to the tier's file.
class NvmeCursor {
 public:
  NvmeCursor(const chunkmem::ChunkRuntime& rt, bool written) : rt_(rt), written_(written) {}
  // Mounts `chunk` if its state is on the tier; true when it is (the views are then the
  // ring slot's, valid until the next call: a caller that keeps them clones them).
  bool Mount(int chunk) {
    if (!rt_.optimizer_on_nvme(chunk)) return false;
    if (chunk != chunk_) {
      mount_.reset();
      chunk_ = -1;  // nothing mounted, should the mount below throw
      mount_.emplace(*rt_.nvme(), chunk);
      if (written_) mount_->set_written();
      chunk_ = chunk;
    }
    return true;
  }

 private:
  const chunkmem::ChunkRuntime& rt_;
  bool written_;
  std::optional<chunkmem::NvmeMount> mount_;
  int chunk_ = -1;
};

// Parameter i's 8-bit moment `kind` (m or v) in its chunk's payload.
optim::Int8Moment Int8MomentOf(const chunkmem::ChunkRuntime& rt, chunkmem::ChunkKind kind, int i) {
  const auto& pl = rt.layout().placements()[i];
  return optim::Int8MomentOf(rt.store().payload(rt.chunk_id(kind, pl.chunk_id)),
                             rt.layout().chunks()[pl.chunk_id].capacity_numel, pl.offset_numel, pl.numel);
}

// A checkpoint's deferred values (EngineState::deferred), read as the writer asks for
// them: the NVMe tier's state one chunk at a time, and 8-bit moments packed (codes, then
// block scales) one parameter at a time into host memory: no copy of the whole state.
class ChunkValues final : public DeferredValues {
 public:
  explicit ChunkValues(const chunkmem::ChunkRuntime& rt) : rt_(rt) {
    for (int i = 0; i < static_cast<int>(rt.params().size()); ++i) {
      index_[rt.params()[i].name] = i;
      reads_tier_ = reads_tier_ || rt.optimizer_on_nvme(rt.layout().placements()[i].chunk_id);
    }
  }
  at::Tensor Read(const std::string& map, const std::string& name) override {
    const int i = index_.at(name);
    if (!cursor_) cursor_.emplace(rt_, /*written=*/false);
    cursor_->Mount(rt_.layout().placements()[i].chunk_id);
    const ChunkKind kind = map == "params" ? ChunkKind::kMaster : map == "exp_avg" ? ChunkKind::kAdamM : ChunkKind::kAdamV;
    if (kind == ChunkKind::kMaster || rt_.state_dtype() != at::kByte) return rt_.View(kind, i);  // the slot's, if mounted
    packed_ = optim::PackInt8(Int8MomentOf(rt_, kind, i));  // the one before is the writer's no more
    return packed_;
  }
  bool reads_tier() const override { return reads_tier_; }
  // The chunk, then the map (a chunk's m and v come from one mounted slot), then the offset.
  std::array<int64_t, 3> Position(const std::string& map, const std::string& name) const override {
    const auto& pl = rt_.layout().placements()[index_.at(name)];
    const int64_t map_rank = map == "params" ? 0 : map == "exp_avg" ? 1 : 2;
    return {pl.chunk_id, map_rank, pl.offset_numel};
  }
  void Finish() override {  // the last chunk unmounted
    cursor_.reset();
    packed_ = at::Tensor();
  }

 private:
  const chunkmem::ChunkRuntime& rt_;
  std::optional<NvmeCursor> cursor_;
  std::unordered_map<std::string, int> index_;
  bool reads_tier_ = false;  // some chunk's optimizer state is on the NVMe tier
  at::Tensor packed_;        // the last 8-bit moment read
};

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

models::TensorMap ChunkEngine::GatherGroups(bool frozen) const {
  at::NoGradGuard no_grad;
  const auto& rt = *chunks_.runtime;
  const auto& layout = rt.layout();
  const int p = comm_->world_size();
  const int64_t n = layout.regular_capacity_numel();
  std::vector<std::vector<int>> params_of_group(layout.num_chunks() / p);
  for (int i = 0; i < static_cast<int>(rt.params().size()); ++i) {
    params_of_group[layout.placements()[i].chunk_id / p].push_back(i);
  }
  models::TensorMap out;
  for (int g = 0; g < layout.num_chunks() / p; ++g) {
    bool all_frozen = true;
    for (int k = 0; k < p; ++k) all_frozen = all_frozen && layout.chunks()[g * p + k].frozen;
    if (all_frozen && !frozen) continue;  // the same decision on every rank: the layout's
    const int own = g * p + comm_->rank();
    const ChunkKind kind = layout.chunks()[own].frozen ? ChunkKind::kCompute : ChunkKind::kMaster;
    NvmeCursor nvme(rt, /*written=*/false);
    if (kind == ChunkKind::kMaster) nvme.Mount(own);
    const at::Tensor mine =
        rt.store().payload(rt.chunk_id(kind, own)).to(CollectiveDevice(*comm_, device_), at::kFloat, false, true);
    at::Tensor group = at::empty({p * n}, mine.options());
    comm_->AllGather(group, mine)->Wait();
    group = group.cpu();
    for (int i : params_of_group[g]) {
      const auto& pl = layout.placements()[i];
      if (rt.frozen(i) && !frozen) continue;
      out[rt.params()[i].name] =
          group.narrow(0, (pl.chunk_id % p) * n + pl.offset_numel, pl.numel).view(rt.param_sizes(i)).clone();
    }
  }
  for (const auto& hp : chunks_.adam->host_param_states()) out[hp.name] = hp.param.detach();
  if (frozen) {
    for (const auto& [name, param] : chunks_.frozen_host_params) out[name] = param.detach();
  }
  return out;
}

std::string ChunkEngine::FrozenFingerprint() const {
  at::NoGradGuard no_grad;
  const auto& rt = *chunks_.runtime;
  std::unordered_map<std::string, int> chunked;
  for (int i = 0; i < static_cast<int>(rt.params().size()); ++i) chunked[rt.params()[i].name] = i;
  std::unordered_map<std::string, at::Tensor> host(chunks_.frozen_host_params.begin(), chunks_.frozen_host_params.end());
  const bool first_rank = comm_ == nullptr || comm_->rank() == 0;
  // In the model's order (the plain engine's); each value sampled by one rank: a chunk's
  // owner, rank 0 for a (replicated) host parameter.
  std::vector<FingerprintEntry> entries;
  std::vector<at::Tensor> mine;  // [entry] the values this rank samples, or undefined
  for (const auto& p : model_->BlockParameters()) {
    const auto h = host.find(p.name);
    const auto c = chunked.find(p.name);
    if (h != host.end()) {
      entries.push_back({p.name, h->second.sizes().vec(), at::Tensor()});
      mine.push_back(first_rank ? h->second : at::Tensor());
    } else if (c != chunked.end() && rt.frozen(c->second)) {
      const int i = c->second;
      entries.push_back({p.name, rt.param_sizes(i), at::Tensor()});
      mine.push_back(rt.owned(rt.layout().placements()[i].chunk_id) ? rt.View(ChunkKind::kCompute, i) : at::Tensor());
    }
  }
  if (entries.empty()) return "";
  // Row k: entry k's sample bits where this rank samples it, else zero; summed over ranks.
  at::Tensor rows = at::zeros({static_cast<int64_t>(entries.size()), kFingerprintSampleMax}, at::kInt);
  for (size_t k = 0; k < entries.size(); ++k) {
    if (!mine[k].defined()) continue;
    const at::Tensor sample = FingerprintSample(mine[k]);
    rows[static_cast<int64_t>(k)].narrow(0, 0, sample.numel()).copy_(sample.to(at::kInt));
  }
  rows = SumOverRanks(comm_, rows, device_);
  for (size_t k = 0; k < entries.size(); ++k) {
    const int64_t length = FingerprintSampleLength(c10::multiply_integers(entries[k].sizes));
    entries[k].sample = rows[static_cast<int64_t>(k)].narrow(0, 0, length).to(at::kShort);
  }
  return FingerprintOfSamples(entries);
}

EngineState ChunkEngine::Save() const {
  at::NoGradGuard no_grad;
  const auto& rt = *chunks_.runtime;
  EngineState out;
  const int num_params = static_cast<int>(rt.params().size());
  // ZeRO: this rank's share (the parameters of the chunks it owns), which it writes into
  // its own checkpoint files; the step counts of every parameter (state.json's).
  at::Tensor steps = at::zeros({num_params}, at::kLong);
  for (int i = 0; i < num_params; ++i) {
    // LoRA's base: its fingerprint (below), not its values.
    const int chunk = rt.layout().placements()[i].chunk_id;
    if (!rt.owned(chunk) || rt.frozen(i)) continue;
    const std::string& name = rt.params()[i].name;
    // State on the NVMe tier, and 8-bit moments: meta tensors, read by the writer (ChunkValues).
    const bool on_tier = rt.optimizer_on_nvme(chunk);
    const bool int8 = rt.state_dtype() == at::kByte;
    if ((on_tier || int8) && !out.deferred) out.deferred = std::make_shared<ChunkValues>(rt);
    auto value = [&](ChunkKind kind, at::ScalarType dtype) {
      return on_tier ? at::empty(rt.param_sizes(i), at::TensorOptions().dtype(dtype).device(at::kMeta))
                     : rt.View(kind, i);
    };
    // The tier holds a separate fp32 master; else the master is the compute chunk, in memory.
    out.params[name] = rt.separate_master() ? value(ChunkKind::kMaster, at::kFloat) : rt.View(ChunkKind::kMaster, i);
    if (int8) {  // 8-bit moments: codes and block scales, packed as the writer reads them
      const auto packed = at::TensorOptions().dtype(at::kByte).device(at::kMeta);
      const int64_t bytes = optim::PackedInt8Numel(rt.layout().placements()[i].numel);
      out.exp_avg[name] = at::empty({bytes}, packed);
      out.exp_avg_sq[name] = at::empty({bytes}, packed);
    } else {
      out.exp_avg[name] = value(ChunkKind::kAdamM, rt.state_dtype());
      out.exp_avg_sq[name] = value(ChunkKind::kAdamV, rt.state_dtype());
    }
    steps[i] = chunks_.adam->param_steps(i);
  }
  steps = SumOverRanks(comm_, steps, device_);
  for (int i = 0; i < num_params; ++i) {
    if (!rt.frozen(i)) out.adam_steps[rt.params()[i].name] = steps[i].item<int64_t>();
  }
  const std::string fingerprint = FrozenFingerprint();  // collective with comm_
  if (!fingerprint.empty()) out.extra["frozen_fingerprint"] = fingerprint;
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

models::TensorMap ChunkEngine::OwnedMasters() const {
  at::NoGradGuard no_grad;
  const auto& rt = *chunks_.runtime;
  models::TensorMap out;
  NvmeCursor nvme(rt, /*written=*/false);
  for (int i = 0; i < static_cast<int>(rt.params().size()); ++i) {
    const int chunk = rt.layout().placements()[i].chunk_id;
    if (!rt.owned(chunk) || rt.frozen(i)) continue;
    const bool on_tier = nvme.Mount(chunk);  // before the view: an unmounted tier master has no payload
    const at::Tensor master = rt.View(ChunkKind::kMaster, i);
    out[rt.params()[i].name] = on_tier ? master.clone() : master;  // the tier's slot is reused
  }
  for (const auto& hp : chunks_.adam->host_param_states()) out[hp.name] = hp.param.detach();
  return out;
}

models::TensorMap ChunkEngine::GatherParams() const {
  if (comm_ != nullptr) return GatherGroups(/*frozen=*/true);
  const auto& rt = *chunks_.runtime;  // frozen parameters too: their compute slots (any float dtype reads)
  models::TensorMap out = OwnedMasters();
  for (int i = 0; i < static_cast<int>(rt.params().size()); ++i) {
    if (rt.frozen(i)) out[rt.params()[i].name] = rt.View(ChunkKind::kCompute, i);
  }
  for (const auto& [name, param] : chunks_.frozen_host_params) out[name] = param.detach();
  return out;
}

models::TensorMap ChunkEngine::GatherTrainableParams() const {
  return comm_ != nullptr ? GatherGroups(/*frozen=*/false) : OwnedMasters();
}

void ChunkEngine::Load(const EngineState& state) {
  at::NoGradGuard no_grad;
  auto& rt = *chunks_.runtime;
  std::vector<std::string> names;
  for (const auto& p : rt.params()) names.push_back(p.name);
  for (const auto& hp : chunks_.adam->host_param_states()) names.push_back(hp.name);
  for (const auto& [name, param] : chunks_.frozen_host_params) names.push_back(name);
  CheckNoUnknownParams(state, names);
  const bool separate_master = rt.separate_master();
  LoadFrozen(state);
  NvmeCursor nvme(rt, /*written=*/true);
  for (int i = 0; i < static_cast<int>(rt.params().size()); ++i) {
    if (!rt.owned(rt.layout().placements()[i].chunk_id) || rt.frozen(i)) continue;  // ZeRO: its owner loads it
    nvme.Mount(rt.layout().placements()[i].chunk_id);  // state on the NVMe tier: written back after
    const at::Tensor master = rt.View(ChunkKind::kMaster, i);
    const std::string& name = rt.params()[i].name;
    chunks_.adam->set_param_steps(
        i, rt.state_dtype() == at::kByte
               ? RestoreInt8AdamParam(state, name, master, Int8MomentOf(rt, ChunkKind::kAdamM, i),
                                      Int8MomentOf(rt, ChunkKind::kAdamV, i))
               : RestoreAdamParam(state, name, master, rt.View(ChunkKind::kAdamM, i), rt.View(ChunkKind::kAdamV, i)));
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
  for (int i = 0; i < static_cast<int>(rt.params().size()); ++i) {
    if (!rt.frozen(i) || !rt.owned(rt.layout().placements()[i].chunk_id)) continue;
    const std::string& name = rt.params()[i].name;
    // Written when given (the base from model.init_from), rounded to the compute dtype; else kept.
    if (state.params.count(name) != 0) {
      const at::Tensor slot = rt.View(ChunkKind::kCompute, i);
      slot.copy_(StateTensor(state.params, name, slot.sizes(), "parameter", state.params_file));
    }
  }
  for (const auto& [name, param] : chunks_.frozen_host_params) {  // chunk.cpu_embedding: on every rank
    if (state.params.count(name) != 0) {
      param.detach().copy_(StateTensor(state.params, name, param.sizes(), "parameter", state.params_file));
    }
  }
  CheckFrozenFingerprint(state, FrozenFingerprint());
}

}  // namespace ps::trainer
