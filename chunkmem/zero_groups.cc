#include "chunkmem/zero_groups.h"

#include <ATen/core/Tensor.h>
#include <ATen/core/grad_mode.h>
#include <c10/util/Exception.h>

#include <algorithm>

namespace ps::chunkmem {

ZeroGroups::ZeroGroups(comm::Communicator& comm, ChunkStore& store, Residency& residency, GradSink& grads,
                       const ChunkLayout& layout, Chunks chunks, const std::vector<std::vector<int64_t>>& shapes,
                       const std::vector<std::vector<int>>& used_by_blocks, const std::vector<bool>& has_grad,
                       std::function<void(int chunk)> grads_final)
    : comm_(comm),
      store_(store),
      residency_(residency),
      grads_(grads),
      layout_(layout),
      chunks_(std::move(chunks)),
      shapes_(shapes),
      has_grad_(has_grad),
      grads_final_(std::move(grads_final)),
      world_(comm.world_size()),
      rank_(comm.rank()) {
  const int num_groups = layout_.num_chunks() / world_;
  gathered_.resize(num_groups);
  gather_work_.resize(num_groups);
  group_grad_.resize(num_groups);
  remote_.resize(layout_.num_chunks());
  groups_of_block_.resize(1);  // block 0 exists even without parameters
  for (size_t i = 0; i < used_by_blocks.size(); ++i) {
    const int group = layout_.placements()[i].chunk_id / world_;
    for (int b : used_by_blocks[i]) {
      if (static_cast<int>(groups_of_block_.size()) <= b) groups_of_block_.resize(b + 1);
      auto& groups = groups_of_block_[b];
      if (std::find(groups.begin(), groups.end(), group) == groups.end()) groups.push_back(group);
    }
  }
}

const at::Tensor& ZeroGroups::RemotePayload(int chunk) const {
  TORCH_INTERNAL_ASSERT(remote_[chunk].defined(), "chunkmem: chunk ", chunk, " of rank ", chunk % world_,
                        " read while its group is not gathered");
  return remote_[chunk];
}

void ZeroGroups::MakeDeviceRoom(int64_t bytes, int keep, const char* what) {
  store_.ReleaseFinishedCopies();
  if (residency_.FitsOnDevice(bytes, residency_.ChunkBudgetNow())) return;
  if (reducing_group_ >= 0) {  // a reduction in flight holds a group buffer: finish it first
    FinishReduction();
    if (residency_.FitsOnDevice(bytes, residency_.ChunkBudgetNow())) return;
  }
  if (residency_.EvictDownTo(residency_.ChunkBudgetNow() - bytes, keep, bytes)) return;
  if (store_.CanHold(Tier::kDevice, bytes)) return;  // over the traced share, within the store's budget
  TORCH_CHECK(false, "chunkmem: rank ", rank_, ": no device room for ", what, " (", bytes, " bytes): ",
              store_.BytesUsed(Tier::kDevice), " of ", store_.Budget(Tier::kDevice),
              " bytes are held by chunks in use and gathered groups; raise the device budget or lower "
              "chunk.size_elements");
}

void ZeroGroups::EnsureGathered(int chunk) {
  const int group = chunk / world_;
  if (gathered_[group].defined()) {
    WaitGather(group);
  } else {
    Gather(group);
  }
}

void ZeroGroups::Gather(int group, bool ahead) {
  at::NoGradGuard no_grad;
  const int own = group * world_ + rank_;
  residency_.Fetch(own);  // the gather's input
  const int64_t n = layout_.chunks()[own].capacity_numel;
  const auto dtype = chunks_.compute_dtype;
  const int64_t bytes = world_ * n * static_cast<int64_t>(c10::elementSize(dtype));
  MakeDeviceRoom(bytes, own, "a gathered chunk group");
  at::Tensor buffer = store_.Borrow(Tier::kDevice, world_ * n, dtype, /*zero=*/false);
  comm::WorkPtr work = comm_.AllGather(buffer, store_.payload(chunks_.compute_ids[own]));
  if (ahead) {
    gather_work_[group] = std::move(work);
    residency_.Pin(own);  // its input is not evicted meanwhile (WaitGather unpins it)
  } else {
    work->Wait();
  }
  for (int k = 0; k < world_; ++k) {
    const int chunk = group * world_ + k;
    if (chunk != own) remote_[chunk] = buffer.narrow(0, k * n, n);
  }
  gathered_[group] = std::move(buffer);
  ++stats_.group_gathers;
  stats_.comm_bytes += bytes / world_;
  residency_.NoteDeviceBytes();
}

void ZeroGroups::WaitGather(int group) {
  if (!gather_work_[group]) return;
  comm::WorkPtr work = std::move(gather_work_[group]);
  gather_work_[group] = nullptr;
  residency_.Unpin(group * world_ + rank_);
  work->Wait();
}

void ZeroGroups::PrefetchNext() {
  if (!residency_.prefetching()) return;
  // Not across the optimizer step (it changes the owned chunks), nor past the trace.
  const int next = residency_.moment() + 1;
  if (next >= residency_.trace().total_moments()) return;
  for (int c : residency_.trace().ChunksAt(next)) {
    const int group = c / world_;
    if (gathered_[group].defined()) continue;
    Gather(group, /*ahead=*/true);
    ++stats_.group_prefetches;
  }
}

void ZeroGroups::ReleaseGroup(int group) {
  WaitGather(group);
  for (int k = 0; k < world_; ++k) remote_[group * world_ + k] = at::Tensor();
  store_.GiveBack(Tier::kDevice, gathered_[group]);
}

void ZeroGroups::ReleaseIdle(int block) {
  const std::vector<int> none;
  const auto& needed = block >= 0 ? groups_of_block_.at(block) : none;
  for (int g = 0; g < static_cast<int>(gathered_.size()); ++g) {
    if (!gathered_[g].defined() || std::find(needed.begin(), needed.end(), g) != needed.end()) continue;
    bool in_use = false;
    for (int k = 0; k < world_; ++k) in_use = in_use || residency_.in_use(g * world_ + k) > 0;
    if (!in_use) ReleaseGroup(g);
  }
}

void ZeroGroups::AddGrad(int index, const at::Tensor& grad) {
  if (reducing_group_ >= 0) overlapped_since_reduce_ = true;
  grads_.MarkArrived(index);
  const auto& pl = layout_.placements()[index];
  const int group = pl.chunk_id / world_;
  if (group == reducing_group_) FinishReduction();  // the group's next micro-batch (accumulation)
  at::Tensor& buffer = group_grad_[group];
  const int64_t n = layout_.chunks()[pl.chunk_id].capacity_numel;
  if (!buffer.defined()) {
    MakeDeviceRoom(world_ * n * 4, /*keep=*/-1, "a group's gradient buffer");
    buffer = store_.Borrow(Tier::kDevice, world_ * n, at::kFloat, /*zero=*/true);
    residency_.NoteDeviceBytes();
  }
  const int64_t slot = pl.chunk_id % world_;
  buffer.narrow(0, slot * n + pl.offset_numel, pl.numel).view(shapes_[index]).add_(grad);
}

void ZeroGroups::ReduceIfComplete(int chunk) {
  const int group = chunk / world_;
  if (group_grad_[group].defined() && GroupGradsIn(group)) ReduceGroupGrads(group);
}

bool ZeroGroups::GroupGradsIn(int group) const {
  for (int k = 0; k < world_; ++k) {
    const int chunk = group * world_ + k;
    if (!layout_.chunks()[chunk].frozen && !grads_.MicroBatchIn(chunk)) return false;  // frozen: none come
  }
  return true;
}

// Started without waiting, so the reduction runs while backward computes the blocks
// before; the previous one is finished first, so at most one is in flight (one group
// buffer beyond the block's: --plan's two-block working set holds it, and MakeDeviceRoom
// finishes it when room is short).
void ZeroGroups::ReduceGroupGrads(int group) {
  at::NoGradGuard no_grad;
  FinishReduction();
  const int own = group * world_ + rank_;
  const int64_t n = layout_.chunks()[own].capacity_numel;
  // Averaged in fp32: one rank at p x the micro-batch has the mean of these gradients.
  // In place: the result is this rank's slot of the buffer (NCCL's in-place form).
  const at::Tensor reduced = group_grad_[group].narrow(0, rank_ * n, n);
  reduce_work_ = comm_.ReduceScatter(reduced, group_grad_[group], comm::ReduceOp::kAvg);
  reducing_group_ = group;
  ++stats_.group_reductions;
  stats_.comm_bytes += world_ * n * 4;
}

void ZeroGroups::FinishBackward() {
  // Groups whose parameters were used without a gradient kept their buffer open.
  for (int g = 0; g < static_cast<int>(group_grad_.size()); ++g) {
    if (group_grad_[g].defined() && g != reducing_group_) ReduceGroupGrads(g);
  }
  FinishReduction();  // every reduction is in before the optimizer reads the grad chunks
}

void ZeroGroups::FinishReduction() {
  if (reducing_group_ < 0) return;
  at::NoGradGuard no_grad;
  const int group = reducing_group_;
  reducing_group_ = -1;
  comm::WorkPtr work = std::move(reduce_work_);
  reduce_work_ = nullptr;
  work->Wait();
  if (overlapped_since_reduce_) ++stats_.reductions_overlapped;
  overlapped_since_reduce_ = false;
  const int own = group * world_ + rank_;
  const int64_t n = layout_.chunks()[own].capacity_numel;
  // A frozen chunk in a group with trainable ones: its slot of the sum is zero, and it has
  // no gradient to write (its compute slots, which gradients may share, hold the base).
  const bool frozen = layout_.chunks()[own].frozen;
  if (!frozen) WriteReduced(own, group_grad_[group].narrow(0, rank_ * n, n));
  store_.GiveBack(Tier::kDevice, group_grad_[group]);
  if (!frozen) grads_final_(own);  // in the final micro-batch, its owner's gradients are complete
}

void ZeroGroups::WriteReduced(int own, const at::Tensor& reduced) {
  const at::Tensor& grads = store_.payload(chunks_.grad_ids[own]);
  const at::Tensor source = grads.device() == reduced.device() ? reduced : store_.ToHostSync(reduced);
  if (!chunks_.grads_in_compute_chunks) {
    grads.add_(source);
    grads_.MarkDirty(own);
    return;
  }
  // 14/p bytes per parameter: one micro-batch per step, so the averaged gradient
  // overwrites the owned compute slots (rounded once to the compute dtype), as in a
  // one-process run; a parameter without a gradient this step keeps its values. No
  // gather of the group follows in this backward: its gradients are all in.
  const auto& indices = layout_.chunks()[own].param_indices;
  const int64_t end = layout_.chunks()[own].used_numel;
  const bool all = std::all_of(indices.begin(), indices.end(), [this](int index) { return has_grad_[index]; });
  if (all) {  // the gaps between slots are zero in both
    grads.narrow(0, 0, end).copy_(source.narrow(0, 0, end));
    return;
  }
  for (int index : indices) {
    if (!has_grad_[index]) continue;
    const auto& pl = layout_.placements()[index];
    grads.narrow(0, pl.offset_numel, pl.numel).copy_(source.narrow(0, pl.offset_numel, pl.numel));
  }
}

}  // namespace ps::chunkmem
