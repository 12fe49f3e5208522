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
  counts_.assign(layout_.num_chunks(), {});
  states_.assign(params_.size(), TensorState::kFree);
  has_grad_.assign(params_.size(), false);
  for (const auto& p : params_) shapes_.push_back(p.tensor.sizes().vec());

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
  if (options.device_memory_bytes > 0 && where.warmup_share_bytes == 0) {
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
  MakeResidency();
  MakeGradSink();
  if (zero()) MakeZeroGroups();
}

void ChunkRuntime::MakeResidency() {
  ResidencySettings settings;
  settings.eviction = options_.eviction;
  settings.warmup_iterations = options_.warmup_iterations;
  settings.prefetch_depth = options_.prefetch_depth;
  settings.device_memory_bytes = options_.device_memory_bytes;
  settings.static_placement = options_.static_placement;
  settings.warmup_device_bytes = placement_.warmup_device_bytes;
  settings.device_optimizer_bytes = placement_.device_optimizer_bytes;
  std::vector<int> ids;
  std::vector<bool> held;
  for (int c = 0; c < layout_.num_chunks(); ++c) {
    ids.push_back(chunk_id(ChunkKind::kCompute, c));
    held.push_back(owned(c));
  }
  residency_ = std::make_unique<Residency>(store_, std::move(ids), std::move(held), settings);
  residency_->set_give_way([this](const std::function<bool()>& evict) { return grads_->GiveWay(evict); });
  residency_->set_describe_users([this](int chunk) { return UsersOf(chunk); });
}

void ChunkRuntime::MakeGradSink() {
  GradSink::Chunks chunks;
  for (int c = 0; c < layout_.num_chunks(); ++c) {
    chunks.grad_ids.push_back(chunk_id(ChunkKind::kGrad, c));
    chunks.adam_m_ids.push_back(chunk_id(ChunkKind::kAdamM, c));
  }
  std::vector<std::vector<int>> used_by;
  for (const auto& p : params_) used_by.push_back(p.used_by_blocks);
  grads_ = std::make_unique<GradSink>(store_, *residency_, layout_, std::move(chunks), shapes_, used_by, states_,
                                      options_.block_major_backward, [this](int chunk) { GradsFinal(chunk); });
}

void ChunkRuntime::MakeZeroGroups() {
  ZeroGroups::Chunks chunks;
  chunks.compute_dtype = options_.compute_dtype;
  chunks.grads_in_compute_chunks = options_.grads_in_compute_chunks;
  for (int c = 0; c < layout_.num_chunks(); ++c) {
    chunks.compute_ids.push_back(chunk_id(ChunkKind::kCompute, c));
    chunks.grad_ids.push_back(chunk_id(ChunkKind::kGrad, c));
  }
  std::vector<std::vector<int>> used_by;
  for (const auto& p : params_) used_by.push_back(p.used_by_blocks);
  zero_groups_ = std::make_unique<ZeroGroups>(*options_.comm, store_, *residency_, *grads_, layout_, std::move(chunks),
                                              shapes_, used_by, has_grad_, [this](int chunk) { GradsFinal(chunk); });
}

const at::Tensor& ChunkRuntime::ComputePayload(int chunk) const {
  if (owned(chunk)) return store_.payload(chunk_id(ChunkKind::kCompute, chunk));
  return zero_groups_->RemotePayload(chunk);
}

std::string ChunkRuntime::UsersOf(int chunk) const {
  for (int i : layout_.chunks()[chunk].param_indices) {
    if (states_[i] == TensorState::kCompute) return params_[i].name;
  }
  return "chunk " + std::to_string(chunk);
}

void ChunkRuntime::set_busy(int chunk, bool busy) {
  if (busy_.empty()) busy_.assign(layout_.num_chunks(), false);
  if (busy_[chunk] == busy) return;
  busy_[chunk] = busy;
  if (busy) {
    residency_->Pin(chunk);
  } else {
    residency_->Unpin(chunk);
  }
}

RuntimeStats ChunkRuntime::stats() const {
  RuntimeStats all;
  static_cast<ResidencyStats&>(all) = residency_->stats();
  static_cast<GradSinkStats&>(all) = grads_->stats();
  if (zero_groups_) static_cast<ZeroStats&>(all) = zero_groups_->stats();
  return all;
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

void ChunkRuntime::Access(int index) {
  if (states_[index] == TensorState::kCompute) return;  // re-entrant: a shared parameter
  const int chunk = layout_.placements()[index].chunk_id;
  if (zero()) zero_groups_->EnsureGathered(chunk);
  residency_->Acquire(chunk);
  SetState(index, TensorState::kCompute);
  params_[index].tensor.set_data(View(ChunkKind::kCompute, index));
}

void ChunkRuntime::Release(int index, TensorState to) {
  SetState(index, to);
  residency_->Release(layout_.placements()[index].chunk_id);
  params_[index].tensor.set_data(
      at::empty({0}, at::TensorOptions().dtype(options_.compute_dtype).device(compute_device())));
}

void ChunkRuntime::PreForward(int block) {
  residency_->BeginMoment("forward", block);
  if (zero()) zero_groups_->ReleaseIdle(block);
  for (int i : params_of_block_.at(block)) Access(i);
  if (zero()) zero_groups_->PrefetchNext();
  residency_->Prefetch();
}

void ChunkRuntime::PostForward(int block) {
  for (int i : params_of_block_.at(block)) {
    if (states_[i] == TensorState::kCompute) Release(i, TensorState::kHoldAfterFwd);
  }
}

void ChunkRuntime::PreBackward(int block) {
  // Block-major: the chunks backward has left are complete; their slots go first, so the
  // moment's budget does not count them as in use.
  if (options_.block_major_backward) grads_->EnterBackwardBlock(block);
  residency_->BeginMoment("backward", block);
  if (zero()) zero_groups_->ReleaseIdle(block);
  for (int i : params_of_block_.at(block)) Access(i);
  if (zero()) zero_groups_->PrefetchNext();
  residency_->Prefetch();
}

// OnGradAccumulated, AfterBackward, ZeroGrads: the gradient hooks, in runtime_grads.cc.

void ChunkRuntime::EndIteration() {
  for (size_t i = 0; i < params_.size(); ++i) {
    const int index = static_cast<int>(i);
    if (states_[i] == TensorState::kCompute) Release(index, TensorState::kHoldAfterBwd);
    if (states_[i] != TensorState::kHold) SetState(index, TensorState::kHold);
  }
  if (zero()) zero_groups_->ReleaseIdle(/*block=*/-1);
  residency_->EndIteration();
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

}  // namespace ps::chunkmem
