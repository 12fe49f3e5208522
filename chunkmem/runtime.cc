#include "chunkmem/runtime.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <c10/util/Exception.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <chrono>
#include <limits>

namespace ps::chunkmem {
namespace {

// Runs after autograd accumulated a parameter's gradient: its last backward use.
class GradArrivedHook final : public torch::autograd::PostAccumulateGradHook {
 public:
  GradArrivedHook(ChunkRuntime* runtime, int index) : runtime_(runtime), index_(index) {}
  void operator()(const torch::autograd::Variable& /*param*/) override { runtime_->OnGradAccumulated(index_); }

 private:
  ChunkRuntime* runtime_;
  int index_;
};

constexpr int kCompute = static_cast<int>(ChunkKind::kCompute);

}  // namespace

ChunkRuntime::ChunkRuntime(std::vector<ManagedParam> params, ChunkStore& store, const RuntimeOptions& options)
    : params_(std::move(params)), store_(store), options_(options) {
  std::vector<ParamSpec> specs;
  int max_block = 0;
  for (const auto& p : params_) {
    TORCH_CHECK(p.tensor.defined() && p.tensor.is_leaf() && p.tensor.requires_grad(),
                "chunkmem: parameter '", p.name, "' must be a leaf that requires grad");
    TORCH_CHECK(!p.used_by_blocks.empty(), "chunkmem: parameter '", p.name, "' is used by no block");
    specs.push_back({p.name, p.tensor.numel(), p.used_by_blocks.front()});
    for (int b : p.used_by_blocks) max_block = std::max(max_block, b);
  }
  if (options.comm != nullptr) {
    zero_ = true;
    world_ = options.comm->world_size();
    rank_ = options.comm->rank();
  }
  const int64_t chunk_numel = options.chunk_numel > 0 ? options.chunk_numel : ChooseChunkNumel(specs, world_);
  layout_ = ChunkLayout::Plan(specs, {chunk_numel, world_, /*align_numel=*/32});
  if (zero()) {
    for (const auto& chunk : layout_.chunks()) {
      TORCH_CHECK(chunk.capacity_numel == layout_.regular_capacity_numel(), "chunkmem: ZeRO gathers chunks of one "
                  "size, but a parameter is larger than chunk.size_elements ", chunk_numel,
                  " (use chunk.size_elements: auto, or at least the largest parameter)");
    }
  }

  params_of_block_.resize(max_block + 1);
  for (size_t i = 0; i < params_.size(); ++i) {
    for (int b : params_[i].used_by_blocks) params_of_block_[b].push_back(static_cast<int>(i));
  }
  const bool separate_master = options.compute_dtype != at::kFloat;
  TORCH_CHECK(!options.grads_in_compute_chunks || separate_master,
              "chunkmem: gradients can reuse the compute slots only when the compute dtype is not fp32");
  TORCH_CHECK(!options.block_major_backward || (!zero() && !options.grads_in_compute_chunks),
              "chunkmem: a block-major backward (train.accumulation_schedule: vertical) adds gradients into fp32 grad "
              "chunks; it is not built for ZeRO or for gradients in the compute slots");
  blocks_of_chunk_.resize(layout_.num_chunks());
  for (size_t i = 0; i < params_.size(); ++i) {
    auto& blocks = blocks_of_chunk_[layout_.placements()[i].chunk_id];
    blocks.insert(blocks.end(), params_[i].used_by_blocks.begin(), params_[i].used_by_blocks.end());
  }
  for (auto& blocks : blocks_of_chunk_) {  // ascending, each once: front() is the lowest
    std::sort(blocks.begin(), blocks.end());
    blocks.erase(std::unique(blocks.begin(), blocks.end()), blocks.end());
  }
  counts_.assign(layout_.num_chunks(), {});
  prefetched_.assign(layout_.num_chunks(), false);
  states_.assign(params_.size(), TensorState::kFree);
  has_grad_.assign(params_.size(), false);
  for (const auto& p : params_) shapes_.push_back(p.tensor.sizes().vec());
  const int num_groups = layout_.num_chunks() / world_;
  gathered_.resize(num_groups);
  gather_work_.resize(num_groups);
  group_grad_.resize(num_groups);
  remote_.resize(layout_.num_chunks());
  groups_of_block_.resize(max_block + 1);
  for (size_t i = 0; i < params_.size(); ++i) {
    const int group = layout_.placements()[i].chunk_id / world_;
    for (int b : params_[i].used_by_blocks) {
      auto& groups = groups_of_block_[b];
      if (std::find(groups.begin(), groups.end(), group) == groups.end()) groups.push_back(group);
    }
  }

  // Where every chunk sits (placement.h; `--plan` calls the same function).
  PlacementInput where = options_.placement;
  where.compute_element_bytes = static_cast<int64_t>(c10::elementSize(options.compute_dtype));
  where.grads_in_compute_chunks = options.grads_in_compute_chunks;
  where.block_major_grads = options.block_major_backward;
  where.device_budget_bytes = store_.Budget(Tier::kDevice);
  where.host_budget_bytes = store_.Budget(Tier::kHost);
  where.host_scratch_chunks = HostGradScratchChunks(options.grads_in_compute_chunks);
  where.world_size = world_;
  where.zero = zero_;
  where.rank = rank_;
  where.prefetch_groups = options.prefetch_depth > 0;
  if (traced_budget() && where.warmup_share_bytes == 0) {
    where.warmup_share_bytes =
        static_cast<int64_t>(options.warmup_chunk_ratio * static_cast<double>(options.device_memory_bytes));
  }
  std::vector<std::vector<int>> used_by;
  for (const auto& p : params_) used_by.push_back(p.used_by_blocks);
  placement_ = PlanPlacement(layout_, used_by, where);

  at::NoGradGuard no_grad;
  const auto empty = at::empty({0}, at::TensorOptions().dtype(options.compute_dtype).device(compute_device()));
  // Chunk by chunk: allocate its payloads, copy its parameters in, release their own
  // storage. Host memory then peaks near the chunks' bytes plus one chunk's parameters,
  // not chunks plus the whole model (a 1.5B model in fp32 is 6 GB more). Optimizer
  // state placed on the device goes there directly, never through the host; it is
  // allocated before any compute chunk moves, so in an arena it is one block.
  struct Slots {  // with options.initial_values: where parameter `index`'s values go
    int index;
    at::Tensor master, compute;
  };
  std::vector<Slots> fill;
  // Payloads are allocated uninitialised and zeroed below on many threads (start-up is
  // bounded by memory bandwidth, issue #9 §4): m, v and grads whole; a chunk that
  // receives its parameters' values only where no parameter lies (alignment gaps and
  // the padding past the last one), so no byte is written twice.
  struct Zeroing {
    at::Tensor payload;
    int chunk;  // -1: the whole payload; else zero the gaps between chunk's parameters
  };
  std::vector<Zeroing> zeroing;
  using Clock = std::chrono::steady_clock;
  const auto allocate_start = Clock::now();
  for (int c = 0; c < layout_.num_chunks(); ++c) {
    const auto& chunk = layout_.chunks()[c];
    const Tier optimizer_tier = placement_.optimizer_on_device[c] ? Tier::kDevice : Tier::kHost;
    std::array<int, 5> ids{};
    if (!owned(c)) {  // ZeRO: only a compute entry, never given a payload (gathered views instead)
      ids.fill(-1);
      ids[kCompute] = store_.Add(chunk.capacity_numel, options.compute_dtype);
      ids_.push_back(ids);
      for (int index : chunk.param_indices) {
        SetState(index, TensorState::kHold);
        params_[index].tensor.set_data(empty);
        torch::autograd::impl::set_post_acc_grad_hooks(params_[index].tensor,
                                                       std::make_unique<GradArrivedHook>(this, index));
      }
      continue;
    }
    auto add = [&](at::ScalarType dtype, Tier tier, bool holds_values) {
      const int id = store_.Add(chunk.capacity_numel, dtype);
      store_.Allocate(id, tier, /*zero=*/false);  // zeroed below: m, v and grads start at 0
      zeroing.push_back({store_.payload(id), holds_values ? c : -1});
      return id;
    };
    ids[kCompute] = add(options.compute_dtype, Tier::kHost, true);
    ids[static_cast<int>(ChunkKind::kGrad)] =
        options.grads_in_compute_chunks ? ids[kCompute] : add(at::kFloat, Tier::kHost, false);
    ids[static_cast<int>(ChunkKind::kMaster)] =
        separate_master ? add(at::kFloat, optimizer_tier, true) : ids[kCompute];
    ids[static_cast<int>(ChunkKind::kAdamM)] = add(at::kFloat, optimizer_tier, false);
    ids[static_cast<int>(ChunkKind::kAdamV)] = add(at::kFloat, optimizer_tier, false);
    ids_.push_back(ids);
    for (int index : chunk.param_indices) {
      auto& param = params_[index].tensor;
      if (options.initial_values) {  // written on many threads below, after the zeroing
        fill.push_back({index, View(ChunkKind::kMaster, index), View(ChunkKind::kCompute, index)});
      } else {
        View(ChunkKind::kCompute, index).copy_(param);
        if (separate_master) View(ChunkKind::kMaster, index).copy_(param);
      }
      SetState(index, TensorState::kHold);  // kFree -> kHold: the init copy
      param.set_data(empty);                // the model's own storage is released
      torch::autograd::impl::set_post_acc_grad_hooks(param, std::make_unique<GradArrivedHook>(this, index));
    }
  }
  // Initial values written in their slots, one parameter per task: each depends on the
  // parameter alone (models/param_init.h), so the order and the threads do not matter.
  // Masters on the host (or the simulated device, host memory too) are written in
  // place; a master on a CUDA device through one host buffer per task, reused for its
  // parameters (its pages are touched once per task, not once per parameter).
  const auto zero_start = Clock::now();
  startup_seconds_.allocate_s = std::chrono::duration<double>(zero_start - allocate_start).count();
  at::parallel_for(0, static_cast<int64_t>(zeroing.size()), 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      at::Tensor& payload = zeroing[i].payload;
      if (zeroing[i].chunk < 0) {
        payload.zero_();
        continue;
      }
      const ChunkSpec& spec = layout_.chunks()[zeroing[i].chunk];
      int64_t from = 0;  // parameters lie in offset order (ChunkSpec::param_indices)
      for (int index : spec.param_indices) {
        const ParamPlacement& pl = layout_.placements()[index];
        if (pl.offset_numel > from) payload.narrow(0, from, pl.offset_numel - from).zero_();
        from = pl.offset_numel + pl.numel;
      }
      if (payload.numel() > spec.used_numel) payload.narrow(0, spec.used_numel, payload.numel() - spec.used_numel).zero_();
    }
  });
  zeroing.clear();
  const auto values_start = Clock::now();
  startup_seconds_.zero_s = std::chrono::duration<double>(values_start - zero_start).count();
  at::parallel_for(0, static_cast<int64_t>(fill.size()), 1, [&](int64_t begin, int64_t end) {
    at::Tensor staging;  // host fp32, grown to the largest device-placed master of the task
    for (int64_t i = begin; i < end; ++i) {
      Slots& f = fill[i];
      at::Tensor values = f.master;
      if (!f.master.device().is_cpu()) {
        if (!staging.defined() || staging.numel() < f.master.numel()) staging = at::empty({f.master.numel()}, at::kFloat);
        values = staging.narrow(0, 0, f.master.numel()).view(f.master.sizes());
      }
      if (!options_.initial_values(f.index, values)) values.zero_();
      if (!values.is_same(f.master)) f.master.copy_(values);
      if (separate_master) f.compute.copy_(values);
    }
  });
  options_.initial_values = nullptr;  // what it holds (the model, names) is not needed again
  startup_seconds_.initial_values_s = std::chrono::duration<double>(Clock::now() - values_start).count();
}

ChunkRuntime::~ChunkRuntime() {
  alive_.reset();  // graphs still holding pre-backward nodes now fail cleanly
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    torch::autograd::impl::set_post_acc_grad_hooks(params_[i].tensor, nullptr);
    // View waits for copies in flight, which can throw; a destructor must not (it may
    // run while an exception unwinds, and a second one terminates the process).
    try {
      params_[i].tensor.set_data(View(ChunkKind::kMaster, static_cast<int>(i)).clone());
    } catch (const std::exception&) {
      params_[i].tensor.set_data(at::empty({0}, params_[i].tensor.options()));
    }
  }
}

int ChunkRuntime::chunk_id(ChunkKind kind, int chunk) const { return ids_.at(chunk)[static_cast<int>(kind)]; }

at::Tensor ChunkRuntime::View(ChunkKind kind, int index) const {
  const auto& pl = layout_.placements()[index];
  const at::Tensor& payload =
      kind == ChunkKind::kCompute ? ComputePayload(pl.chunk_id) : store_.payload(chunk_id(kind, pl.chunk_id));
  const auto& shape = shapes_[index];
  return payload.narrow(0, pl.offset_numel, pl.numel).view(shape);
}

void ChunkRuntime::SetState(int index, TensorState to) {
  const TensorState from = states_[index];
  CheckTransition(from, to, params_[index].name);
  auto& counts = counts_[layout_.placements()[index].chunk_id];
  --counts[static_cast<int>(from)];
  ++counts[static_cast<int>(to)];
  states_[index] = to;
}

void ChunkRuntime::CloseInterval() {
  if (!probe_) return;
  const int64_t non_model = probe_->TakePeakNonModelBytes();
  if (moment_ >= 0) {
    stats_.peak_non_model_bytes = std::max(stats_.peak_non_model_bytes, non_model);
    if (!warmed_up()) {
      if (static_cast<int>(non_model_peak_.size()) <= moment_) non_model_peak_.resize(moment_ + 1, 0);
      non_model_peak_[moment_] = std::max(non_model_peak_[moment_], non_model);
    } else if (traced_budget()) {
      stats_.peak_device_total_bytes = std::max(stats_.peak_device_total_bytes, interval_chunk_peak_ + non_model);
    }
  }
  interval_chunk_peak_ = store_.BytesUsed(Tier::kDevice);
}

int64_t ChunkRuntime::ChunkBudgetNow() const {
  const int64_t cap = store_.Budget(Tier::kDevice);
  if (!traced_budget()) return cap;
  if (budget_at_.empty()) return WarmupShareBytes();
  // Paused (evaluation): moments do not advance, so no moment's budget applies; the
  // lowest one is safe for any block.
  if (trace_paused_) return std::min(cap, min_budget_at_);
  const int t = std::clamp(moment_, 0, static_cast<int>(budget_at_.size()) - 1);
  return std::min(cap, budget_at_[t]);
}

int64_t ChunkRuntime::WarmupShareBytes() const {
  // The pinned optimizer state plus the warm-up share, within the chunk room (placement.h).
  return std::min(store_.Budget(Tier::kDevice), placement_.warmup_device_bytes);
}

int64_t ChunkRuntime::MinChunkBudgetBytes() const {
  if (!traced_budget() || budget_at_.empty()) return ChunkBudgetNow();
  return std::min(store_.Budget(Tier::kDevice), min_budget_at_);
}

void ChunkRuntime::Moment(const char* what, int block) {
  if (trace_paused_) return;
  CloseInterval();
  ++moment_;
  // A moment whose traced budget is lower than the last one's: shrink to it now.
  // Chunks still in use from an earlier moment (a tied parameter through backward) are
  // part of this moment's working set too.
  if (!warmed_up()) {
    for (int c = 0; c < layout_.num_chunks(); ++c) {
      if (ComputeCount(c) > 0) trace_.Record(c, moment_);
    }
  }
  if (!budget_at_.empty() && store_.BytesUsed(Tier::kDevice) > ChunkBudgetNow()) {
    // Gradient staging slots give way to compute chunks (their partial sums go to the host).
    if (!EvictOrGiveWay([&] { return EvictDownTo(ChunkBudgetNow(), /*keep=*/-1); })) {
      ++stats_.budget_overruns;
    }
    interval_chunk_peak_ = store_.BytesUsed(Tier::kDevice);  // the new interval starts after the shrink
  }
  if (timeline_) timeline_->Moment(std::string(what) + " " + std::to_string(block));
}

void ChunkRuntime::MoveChunk(int chunk, Tier to, bool async) {
  TORCH_INTERNAL_ASSERT(!busy(chunk), "chunkmem: chunk ", chunk, " moved while the optimizer updates it");
  const int id = chunk_id(ChunkKind::kCompute, chunk);
  const int64_t start_us = timeline_ ? timeline_->NowUs() : 0;
  const auto start = std::chrono::steady_clock::now();
  if (async) {
    store_.MoveAsync(id, to);
  } else {
    store_.Move(id, to);
  }
  stats_.move_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (to == Tier::kDevice) {
    interval_chunk_peak_ = std::max(interval_chunk_peak_, store_.BytesUsed(Tier::kDevice));
    ++stats_.fetches;
  } else {
    ++stats_.evictions;
  }
  if (timeline_) {
    timeline_->Copy(to == Tier::kDevice ? "fetch" : "evict", chunk, store_.chunk_bytes(id), start_us);
    timeline_->Bytes(store_.BytesUsed(Tier::kDevice), store_.BytesUsed(Tier::kHost));
  }
}

std::vector<EvictionCandidate> ChunkRuntime::EvictableChunks(int keep, int64_t needed_until) const {
  std::vector<EvictionCandidate> out;
  for (int c = 0; c < layout_.num_chunks(); ++c) {
    const int cid = chunk_id(ChunkKind::kCompute, c);
    if (c == keep || store_.tier(cid) != Tier::kDevice || ComputeCount(c) > 0 || busy(c)) continue;
    if (zero() && gather_work_[c / world_]) continue;  // the input of a gather in flight
    if (trace_.NextUse(c, moment_ - 1) <= needed_until) continue;
    out.push_back({c, store_.chunk_bytes(cid)});
  }
  return out;
}

bool ChunkRuntime::FitsOnDevice(int64_t bytes, int64_t budget) const {
  return store_.BytesUsed(Tier::kDevice) + bytes <= budget && (bytes <= 0 || store_.CanHold(Tier::kDevice, bytes));
}

bool ChunkRuntime::EvictDownTo(int64_t target_bytes, int keep, int64_t fit_bytes) {
  store_.ReleaseFinishedCopies();  // device payloads moved out whose copies are done: free them first
  auto done = [&] {
    return store_.BytesUsed(Tier::kDevice) <= target_bytes && (fit_bytes <= 0 || store_.CanHold(Tier::kDevice, fit_bytes));
  };
  if (done()) return true;
  const std::vector<EvictionCandidate> candidates = EvictableChunks(keep, std::numeric_limits<int64_t>::min());
  const EvictionPolicy& policy =
      belady_ ? static_cast<const EvictionPolicy&>(*belady_) : static_cast<const EvictionPolicy&>(lru_);
  // All candidates in eviction order; take them until the bytes are under the target
  // and (with an arena) a free range of fit_bytes exists.
  // Ranked from just before this moment, so chunks used at this moment count as
  // needed soonest (NextUse looks strictly after the moment it is given).
  for (int victim : policy.Choose(candidates, std::numeric_limits<int64_t>::max(), moment_ - 1)) {
    if (done()) break;
    MoveChunk(victim, Tier::kHost);
  }
  return done();
}

void ChunkRuntime::FetchToDevice(int chunk) {
  const int id = chunk_id(ChunkKind::kCompute, chunk);
  if (store_.tier(id) == Tier::kDevice) return;
  const int64_t need = store_.chunk_bytes(id);
  const int64_t budget = ChunkBudgetNow();
  // Gradient staging slots give way to compute chunks (their partial sums go to the host).
  if (!EvictOrGiveWay([&] { return EvictDownTo(budget - need, chunk, need); })) {
    // During a traced warm-up the small warm-up share may be exceeded when the chunks in
    // use need it (up to the store's budget); otherwise the chunks in use do not fit.
    const bool soft = traced_budget() && budget_at_.empty() && store_.CanHold(Tier::kDevice, need);
    if (!soft) {
      int64_t pinned_bytes = 0;
      std::string in_use;
      for (int c = 0; c < layout_.num_chunks(); ++c) {
        const int cid = chunk_id(ChunkKind::kCompute, c);
        if (c == chunk || store_.tier(cid) != Tier::kDevice || ComputeCount(c) == 0) continue;
        pinned_bytes += store_.chunk_bytes(cid);
        for (int i : layout_.chunks()[c].param_indices) {
          if (states_[i] == TensorState::kCompute) {
            in_use += (in_use.empty() ? "" : ", ") + params_[i].name;
            break;
          }
        }
      }
      std::string traced;
      if (traced_budget() && !budget_at_.empty()) {
        const int t = std::clamp(moment_, 0, static_cast<int>(budget_at_.size()) - 1);
        traced = " (traced: device memory " + std::to_string(options_.device_memory_bytes) + ", non-model peak " +
                 std::to_string(non_model_peak_[t]) + " at moment " + std::to_string(t) + ")";
      }
      TORCH_CHECK(false, "chunkmem: chunk ", chunk, " (", need, " bytes) does not fit the device budget of ", budget,
                  " bytes", traced, ": ", pinned_bytes, " bytes are held by chunks in use (by ", in_use,
                  "); raise the device budget or lower chunk.size_elements");
    }
  }
  MoveChunk(chunk, Tier::kDevice);
}

void ChunkRuntime::Access(int index) {
  if (states_[index] == TensorState::kCompute) return;  // re-entrant: a shared parameter
  const int chunk = layout_.placements()[index].chunk_id;
  if (zero()) {
    const int group = chunk / world_;
    if (gathered_[group].defined()) {
      WaitGather(group);
    } else {
      Gather(group);
    }
  }
  if (prefetched_[chunk]) {
    prefetched_[chunk] = false;
    if (store_.tier(chunk_id(ChunkKind::kCompute, chunk)) == Tier::kDevice) ++stats_.prefetch_hits;
  }
  if (owned(chunk)) FetchToDevice(chunk);
  if (!trace_paused_ && !warmed_up()) trace_.Record(chunk, std::max(moment_, 0));
  lru_.Touch(chunk, ++tick_);
  SetState(index, TensorState::kCompute);
  params_[index].tensor.set_data(View(ChunkKind::kCompute, index));
}

void ChunkRuntime::Release(int index, TensorState to) {
  SetState(index, to);
  params_[index].tensor.set_data(
      at::empty({0}, at::TensorOptions().dtype(options_.compute_dtype).device(compute_device())));
}

void ChunkRuntime::PreForward(int block) {
  Moment("forward", block);
  if (zero()) ReleaseIdleGroups(block);
  for (int i : params_of_block_.at(block)) Access(i);
  if (zero()) PrefetchGroups();
  Prefetch();
}

bool ChunkRuntime::MakeRoomFor(int chunk, int64_t need, int64_t next_use_limit) {
  const int64_t budget = ChunkBudgetNow();
  if (FitsOnDevice(need, budget)) return true;
  // Only chunks needed later than the prefetched one may make room for it.
  const std::vector<EvictionCandidate> candidates = EvictableChunks(chunk, next_use_limit);
  int64_t freeable = 0;
  for (const auto& cand : candidates) freeable += cand.bytes;
  const int64_t deficit = store_.BytesUsed(Tier::kDevice) + need - budget;
  if (freeable < deficit) return false;
  for (int victim : belady_->Choose(candidates, deficit, moment_ - 1)) MoveChunk(victim, Tier::kHost);
  return store_.CanHold(Tier::kDevice, need);  // an arena may still lack a large enough range
}

void ChunkRuntime::Prefetch() {
  if (!belady_ || trace_paused_ || options_.prefetch_depth <= 0) return;
  const int total = trace_.total_moments();
  for (int d = 1; d <= options_.prefetch_depth && d < total; ++d) {
    for (int c : trace_.ChunksAt((moment_ + d) % total)) {
      if (!owned(c) || busy(c)) continue;  // ZeRO: gathered, not fetched
      const int id = chunk_id(ChunkKind::kCompute, c);
      if (store_.tier(id) == Tier::kDevice) continue;
      if (!MakeRoomFor(c, store_.chunk_bytes(id), trace_.NextUse(c, moment_))) return;
      MoveChunk(c, Tier::kDevice, /*async=*/true);  // waited for at its first use
      prefetched_[c] = true;
      ++stats_.prefetches;
    }
  }
}

void ChunkRuntime::PostForward(int block) {
  for (int i : params_of_block_.at(block)) {
    if (states_[i] == TensorState::kCompute) Release(i, TensorState::kHoldAfterFwd);
  }
}

void ChunkRuntime::PreBackward(int block) {
  // Block-major: the chunks backward has left are complete; their slots go first, so the
  // moment's budget does not count them as in use.
  if (options_.block_major_backward) FlushChunksAbove(block);
  Moment("backward", block);
  if (zero()) ReleaseIdleGroups(block);
  for (int i : params_of_block_.at(block)) Access(i);
  if (zero()) PrefetchGroups();
  Prefetch();
}

// OnGradAccumulated, AfterBackward, ZeroGrads: the gradient path, in runtime_grads.cc.

void ChunkRuntime::EndIteration() {
  for (size_t i = 0; i < params_.size(); ++i) {
    const int index = static_cast<int>(i);
    if (states_[i] == TensorState::kCompute) Release(index, TensorState::kHoldAfterBwd);
    if (states_[i] != TensorState::kHold) SetState(index, TensorState::kHold);
  }
  if (zero()) ReleaseIdleGroups(/*block=*/-1);
  CloseInterval();  // the last moment's interval includes the optimizer step
  ++stats_.iterations;
  stats_.moments_per_iteration = moment_ + 1;
  FinishWarmupIfDone();
  moment_ = -1;
}

void ChunkRuntime::FinishWarmupIfDone() {
  if (!warmed_up()) return;
  const int moments = stats_.moments_per_iteration;
  if (traced_budget() && budget_at_.empty()) {
    non_model_peak_.resize(moments, 0);
    for (int t = 0; t < moments; ++t) {
      const int64_t budget = options_.device_memory_bytes - non_model_peak_[t];
      // The pinned optimizer state and the chunks this moment uses must be there.
      int64_t needed = placement_.device_optimizer_bytes;
      for (int c : trace_.ChunksAt(t)) needed += store_.chunk_bytes(chunk_id(ChunkKind::kCompute, c));
      // Static placement: the warm-up share (exceeded where the chunks in use need more,
      // as in warm-up), never more than this moment's activations leave.
      int64_t b = options_.static_placement ? std::min(budget, std::max(WarmupShareBytes(), needed)) : budget;
      if (b < needed) {
        // The activations measured more than the start-up placement assumed (the
        // plan's estimate): the chunks in use still get their room, up to the store's
        // hard budget, and the moment counts as an overrun (metrics: budget_overruns).
        b = needed;
        ++stats_.budget_overruns;
      }
      budget_at_.push_back(b);
    }
    if (!budget_at_.empty()) min_budget_at_ = *std::min_element(budget_at_.begin(), budget_at_.end());
  }
  if (!belady_ && options_.eviction == EvictionKind::kOpt) {
    trace_.set_total_moments(moments);
    belady_ = std::make_unique<BeladyPolicy>(trace_);
  }
}

WarmupState ChunkRuntime::SaveWarmup() const {
  WarmupState s;
  s.iterations = stats_.iterations;
  s.total_moments = stats_.moments_per_iteration;
  s.chunk_moments = trace_.chunk_moments();
  s.chunk_moments.resize(layout_.num_chunks());
  s.non_model_peak_bytes = non_model_peak_;
  return s;
}

void ChunkRuntime::RestoreWarmup(const WarmupState& s) {
  TORCH_CHECK(stats_.iterations == 0 && moment_ == -1, "chunkmem: RestoreWarmup after training started");
  TORCH_CHECK(static_cast<int>(s.chunk_moments.size()) == layout_.num_chunks(), "chunkmem: the saved warm-up trace has ",
              s.chunk_moments.size(), " chunks, this layout ", layout_.num_chunks());
  trace_ = AccessTrace();
  for (int c = 0; c < layout_.num_chunks(); ++c) {
    for (int t : s.chunk_moments[c]) {
      TORCH_CHECK(t >= 0 && (s.total_moments == 0 || t < s.total_moments), "chunkmem: saved warm-up moment ", t,
                  " of chunk ", c, " is out of range");
      trace_.Record(c, t);
    }
  }
  non_model_peak_ = s.non_model_peak_bytes;
  stats_.iterations = s.iterations;
  stats_.moments_per_iteration = s.total_moments;
  if (warmed_up()) TORCH_CHECK(s.total_moments > 0, "chunkmem: a finished warm-up without moments");
  FinishWarmupIfDone();
}

int64_t ChunkRuntime::OptimizerStateBytes(int chunk) const {
  int64_t bytes = 0;
  if (!owned(chunk)) return 0;
  for (ChunkKind kind : {ChunkKind::kMaster, ChunkKind::kAdamM, ChunkKind::kAdamV}) {
    const int id = chunk_id(kind, chunk);
    if (id != chunk_id(ChunkKind::kCompute, chunk)) bytes += store_.chunk_bytes(id);  // fp32: master = compute
  }
  return bytes;
}

void ChunkRuntime::PlaceComputeChunk(int chunk, Tier tier, bool async) {
  TORCH_CHECK(ComputeCount(chunk) == 0, "chunkmem: chunk ", chunk, " has parameters in use; it cannot move now");
  const Tier now = store_.tier(chunk_id(ChunkKind::kCompute, chunk));
  if (now == tier) return;
  if (tier == Tier::kDevice) {
    FetchToDevice(chunk);
  } else {
    MoveChunk(chunk, Tier::kHost, async);
  }
}

bool ChunkRuntime::ReturnToDeviceIfRoom(int chunk, bool async) {
  TORCH_CHECK(ComputeCount(chunk) == 0, "chunkmem: chunk ", chunk, " has parameters in use; it cannot move now");
  const int id = chunk_id(ChunkKind::kCompute, chunk);
  if (store_.tier(id) == Tier::kDevice) return true;
  const int64_t need = store_.chunk_bytes(id);
  if (!FitsOnDevice(need, ChunkBudgetNow())) return false;
  MoveChunk(chunk, Tier::kDevice, async);
  return true;
}

std::shared_ptr<CopyTicket> ChunkRuntime::SendComputeChunkToHost(int chunk) {
  PlaceComputeChunk(chunk, Tier::kHost, /*async=*/true);
  return store_.TakePendingCopy(chunk_id(ChunkKind::kCompute, chunk));
}

at::Tensor ChunkRuntime::TryBorrowHost(int64_t numel, at::ScalarType dtype) {
  const int64_t bytes = numel * static_cast<int64_t>(c10::elementSize(dtype));
  if (!store_.CanHold(Tier::kHost, bytes)) return at::Tensor();
  return store_.Borrow(Tier::kHost, numel, dtype, /*zero=*/true);
}

std::shared_ptr<CopyTicket> ChunkRuntime::WriteComputeChunk(int chunk, int64_t offset_numel, const at::Tensor& values) {
  const int id = chunk_id(ChunkKind::kCompute, chunk);
  TORCH_INTERNAL_ASSERT(ComputeCount(chunk) == 0 && !busy(chunk), "chunkmem: WriteComputeChunk needs chunk ", chunk,
                        " idle");
  at::Tensor dst = store_.payload(id).narrow(0, offset_numel, values.numel());
  if (store_.tier(id) == Tier::kDevice) return store_.CopyToDevice(std::move(dst), values);
  dst.copy_(values);
  return nullptr;
}

bool ChunkRuntime::FreeDeviceBytes(int64_t bytes) {
  return EvictDownTo(ChunkBudgetNow() - bytes, /*keep=*/-1, bytes);
}

int64_t ChunkRuntime::PeakWorkingSetBytes() const {
  const int total = trace_.total_moments();
  int64_t peak = 0;
  for (int t = 0; t < total; ++t) {
    std::vector<bool> seen(layout_.num_chunks(), false);
    int64_t bytes = 0;
    for (int d = 0; d <= std::max<int64_t>(0, options_.prefetch_depth) && d < total; ++d) {
      for (int c : trace_.ChunksAt((t + d) % total)) {
        if (seen[c]) continue;
        seen[c] = true;
        bytes += store_.chunk_bytes(chunk_id(ChunkKind::kCompute, c));
      }
    }
    peak = std::max(peak, bytes);
  }
  return peak;
}

}  // namespace ps::chunkmem
