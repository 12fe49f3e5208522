#include "chunkmem/runtime.h"

#include <ATen/core/Tensor.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
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

// Each parameter's blocks, in parameter order (the parts take them as a plain table).
std::vector<std::vector<int>> UsedByBlocks(const std::vector<ManagedParam>& params) {
  std::vector<std::vector<int>> used_by;
  for (const auto& p : params) used_by.push_back(p.used_by_blocks);
  return used_by;
}

}  // namespace

ChunkRuntime::ChunkRuntime(std::vector<ManagedParam> params, ChunkStore& store, const RuntimeOptions& options)
    : params_(std::move(params)), store_(store), options_(options) {
  if (options.comm != nullptr) {
    zero_ = true;
    world_ = options.comm->world_size();
    rank_ = options.comm->rank();
  }
  PlanChunks();
  counts_.assign(layout_.num_chunks(), {});
  states_.assign(params_.size(), TensorState::kFree);
  has_grad_.assign(params_.size(), false);
  std::vector<bool> owned_chunks;
  for (int c = 0; c < layout_.num_chunks(); ++c) owned_chunks.push_back(owned(c));
  const ChunkAllocation request{layout_,         shapes_, options.compute_dtype, options.grads_in_compute_chunks,
                                tiers_.optimizer_on_device, owned_chunks, options.state_dtype,
                                tiers_.optimizer_on_nvme, options.master_weights};
  ChunkValues values;
  values.current = [this](int index) { return params_[index].tensor; };
  values.initial = options_.initial_values;
  ids_ = AllocateChunks(store_, request, values, [this](int chunk) { BindChunk(chunk); }, &startup_seconds_);
  if (tiers_.nvme_chunks > 0) MakeNvme(request, values);
  options_.initial_values = nullptr;  // what it holds (the model, names) is not needed again
  MakeResidency();
  MakeGradSink();
  if (zero()) MakeZeroGroups();
}

void ChunkRuntime::PlanChunks() {
  std::vector<ParamSpec> specs;
  for (const auto& p : params_) {
    TORCH_CHECK(p.tensor.defined() && p.tensor.is_leaf(), "chunkmem: parameter '", p.name, "' must be a leaf");
    TORCH_CHECK(!p.used_by_blocks.empty(), "chunkmem: parameter '", p.name, "' is used by no block");
    // requires_grad false: frozen (LoRA's base), in chunks of the compute kind alone.
    specs.push_back({p.name, p.tensor.numel(), p.used_by_blocks.front(), !p.tensor.requires_grad()});
    shapes_.push_back(p.tensor.sizes().vec());
    for (int b : p.used_by_blocks) {
      if (static_cast<int>(params_of_block_.size()) <= b) params_of_block_.resize(b + 1);
      params_of_block_[b].push_back(static_cast<int>(specs.size()) - 1);
    }
  }
  const int64_t align = ParamAlignNumel(c10::elementSize(options_.state_dtype));
  const int64_t chunk_numel = options_.chunk_numel > 0 ? options_.chunk_numel : ChooseChunkNumel(specs, world_, align);
  layout_ = ChunkLayout::Plan(specs, {chunk_numel, world_, align});
  for (const auto& chunk : layout_.chunks()) {
    TORCH_CHECK(!zero() || chunk.capacity_numel == layout_.regular_capacity_numel(), "chunkmem: ZeRO gathers chunks "
                "of one size, but a parameter is larger than chunk.size_elements ", chunk_numel,
                " (use chunk.size_elements: auto, or at least the largest parameter)");
  }
  if (params_of_block_.empty()) params_of_block_.resize(1);  // block 0 exists even without parameters
  for (size_t i = 0; i < specs.size(); ++i) {
    if (specs[i].frozen) frozen_used_above_.push_back(static_cast<int>(i));
  }
  TORCH_CHECK(options_.state_dtype == at::kFloat || options_.state_dtype == at::kBFloat16 ||
                  options_.state_dtype == at::kByte,
              "chunkmem: Adam m and v are stored in fp32, bf16 or 8-bit codes, not ", options_.state_dtype);
  TORCH_CHECK(!options_.grads_in_compute_chunks || separate_master(),
              "chunkmem: gradients can reuse the compute slots only when the compute dtype is not fp32 and a separate fp32 "
              "master holds the weights");
  TORCH_CHECK(options_.master_weights || options_.compute_dtype == at::kBFloat16,
              "chunkmem: weights without an fp32 master need the bf16 compute dtype");
  TORCH_CHECK(!options_.block_major_backward || (!zero() && !options_.grads_in_compute_chunks),
              "chunkmem: a block-major backward (train.accumulation_schedule: vertical) adds gradients into fp32 grad "
              "chunks; it is not built for ZeRO or for gradients in the compute slots");
  // Where every chunk sits: the caller's TierPlan (tier_plan.h), taken as given.
  tiers_ = std::move(options_.tiers);
  options_.tiers = TierPlan();
  if (tiers_.optimizer_on_device.empty()) tiers_.optimizer_on_device.assign(layout_.num_chunks(), false);
  TORCH_CHECK(static_cast<int>(tiers_.optimizer_on_device.size()) == layout_.num_chunks(), "chunkmem: the "
              "tier plan covers ", tiers_.optimizer_on_device.size(), " chunks, the layout has ", layout_.num_chunks(),
              " (plan it from the same parameters and chunk size)");
  for (int c = 0; c < layout_.num_chunks(); ++c) {
    TORCH_CHECK(owned(c) || !tiers_.optimizer_on_device[c], "chunkmem: the tier plan puts the optimizer state of "
                "chunk ", c, " on the device, but rank ", rank_, " does not own it (plan it for this rank)");
  }
  if (tiers_.optimizer_on_nvme.empty()) return;
  TORCH_CHECK(static_cast<int>(tiers_.optimizer_on_nvme.size()) == layout_.num_chunks(), "chunkmem: the tier plan's "
              "NVMe entries cover ", tiers_.optimizer_on_nvme.size(), " chunks, the layout has ", layout_.num_chunks());
  for (int c = 0; c < layout_.num_chunks(); ++c) {
    TORCH_CHECK(!tiers_.optimizer_on_nvme[c] || (owned(c) && !tiers_.optimizer_on_device[c] && !layout_.chunks()[c].frozen),
                "chunkmem: the tier plan puts chunk ", c, "'s optimizer state on the NVMe tier, but it is not an owned, "
                "host-updated, trainable chunk");
  }
}

void ChunkRuntime::MakeNvme(const ChunkAllocation& request, const ChunkValues& values) {
  TORCH_CHECK(!options_.nvme.dir.empty(), "chunkmem: the tier plan puts optimizer state on the NVMe tier, but no "
              "directory is given (chunk.nvme_dir)");
  const bool separate_master = this->separate_master();
  std::vector<NvmeChunkIds> ids(layout_.num_chunks(), NvmeChunkIds{-1, -1, -1});
  for (int c = 0; c < layout_.num_chunks(); ++c) {
    if (!tiers_.optimizer_on_nvme[c]) continue;
    ids[c] = {separate_master ? chunk_id(ChunkKind::kMaster, c) : -1, chunk_id(ChunkKind::kAdamM, c),
              chunk_id(ChunkKind::kAdamV, c)};
  }
  nvme_ = std::make_unique<NvmeState>(store_, std::move(ids), options_.nvme);
  WriteNvmeChunks(store_, request, ids_, values, *nvme_, [this](int chunk) { BindChunk(chunk); }, &startup_seconds_);
}

void ChunkRuntime::BindChunk(int chunk) {
  at::NoGradGuard no_grad;
  const auto empty = at::empty({0}, at::TensorOptions().dtype(options_.compute_dtype).device(compute_device()));
  for (int index : layout_.chunks()[chunk].param_indices) {
    auto& param = params_[index].tensor;
    SetState(index, TensorState::kHold);  // kFree -> kHold: the values are in the chunks
    param.set_data(empty);                // the model's own storage is released
    if (frozen(index)) continue;          // no gradient ever arrives
    torch::autograd::impl::set_post_acc_grad_hooks(param, std::make_unique<GradArrivedHook>(this, index));
  }
}

void ChunkRuntime::MakeResidency() {
  PlannedDeviceBytes planned;
  planned.warmup_device_bytes = tiers_.warmup_device_bytes;
  planned.device_optimizer_bytes = tiers_.device_optimizer_bytes;
  planned.device_scratch_bytes = tiers_.device_scratch_bytes;
  std::vector<int> ids;
  std::vector<bool> held;
  for (int c = 0; c < layout_.num_chunks(); ++c) {
    ids.push_back(chunk_id(ChunkKind::kCompute, c));
    held.push_back(owned(c));
  }
  residency_ = std::make_unique<Residency>(store_, ids, std::move(held), options_.residency, planned);
  moves_ = std::make_unique<ResidencyMoves>(store_, *residency_, std::move(ids));
  residency_->set_give_way([this](const std::function<bool()>& evict) { return grads_->GiveWay(evict); });
  residency_->set_describe_users([this](int chunk) { return UsersOf(chunk); });
}

void ChunkRuntime::MakeGradSink() {
  GradSink::Chunks chunks;
  for (int c = 0; c < layout_.num_chunks(); ++c) {
    chunks.grad_ids.push_back(chunk_id(ChunkKind::kGrad, c));
    chunks.adam_m_ids.push_back(chunk_id(ChunkKind::kAdamM, c));
  }
  grads_ = std::make_unique<GradSink>(store_, *residency_, layout_, std::move(chunks), shapes_, UsedByBlocks(params_),
                                      states_,
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
  zero_groups_ = std::make_unique<ZeroGroups>(*options_.comm, store_, *residency_, *grads_, layout_, std::move(chunks),
                                              shapes_, UsedByBlocks(params_), has_grad_, [this](int chunk) { GradsFinal(chunk); });
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
      const int index = static_cast<int>(i);
      if (!options_.keep_values_at_exit) {
        params_[i].tensor.set_data(at::empty({0}, params_[i].tensor.options()));
        continue;
      }
      const int chunk = layout_.placements()[i].chunk_id;
      std::unique_ptr<NvmeMount> mount;  // a master on the NVMe tier is read through the ring
      if (!frozen(index) && optimizer_on_nvme(chunk) && separate_master()) {
        mount = std::make_unique<NvmeMount>(*nvme_, chunk);
      }
      params_[i].tensor.set_data(frozen(index) ? View(ChunkKind::kCompute, index).to(at::kFloat)
                                               : View(ChunkKind::kMaster, index).to(at::kFloat, false, true));
    } catch (const std::exception&) {
      params_[i].tensor.set_data(at::empty({0}, params_[i].tensor.options()));
    }
  }
}

at::Tensor ChunkRuntime::BorrowDevice(int64_t numel, at::ScalarType dtype) {
  const int64_t bytes = numel * static_cast<int64_t>(c10::elementSize(dtype));
  store_.ReleaseFinishedCopies();
  if (!residency_->FitsOnDevice(bytes, residency_->ChunkBudgetNow())) residency_->FreeDeviceBytes(bytes);
  at::Tensor buffer = store_.Borrow(Tier::kDevice, numel, dtype, /*zero=*/false);
  residency_->NoteDeviceBytes();  // the peaks see it, as a gradient slot
  return buffer;
}

int ChunkRuntime::chunk_id(ChunkKind kind, int chunk) const { return ids_.at(chunk)[static_cast<int>(kind)]; }

at::Tensor ChunkRuntime::View(ChunkKind kind, int index) const {
  const auto& pl = layout_.placements()[index];
  TORCH_CHECK(kind == ChunkKind::kCompute || chunk_id(kind, pl.chunk_id) >= 0, "chunkmem: parameter '",
              params_[index].name, "' has a compute slot only (", frozen(index) ? "frozen" : "another rank's", ")");
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
  // Slots freed by the last step's writes read the next step's first chunks. Errors wait
  // for the step (this also runs inside backward, recomputing a checkpointed block).
  if (nvme_) nvme_->Poll(/*rethrow=*/false);
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
  // Frozen parameters get no gradient to release them: those used only above `block`
  // are done once its backward starts (docs/chunkmem.md, "Frozen chunks", F3).
  for (int i : frozen_used_above_) {
    if (states_[i] == TensorState::kCompute && params_[i].used_by_blocks.front() > block) {
      Release(i, TensorState::kHoldAfterBwd);
    }
  }
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

}  // namespace ps::chunkmem
