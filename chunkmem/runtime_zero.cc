// ChunkRuntime's ZeRO part (docs/comm.md, "ZeRO over chunk groups"): gathering chunk
// groups for the blocks that use them, and reducing their gradients into the chunks
// this rank owns.
//
// Every rank runs the same model with the same hooks, so parameter states, and with
// them every decision below (gather, release, reduce), are the same on every rank:
// collectives are issued in the same order everywhere. Eviction decisions are a rank's
// own (its owned chunks differ) and never issue a collective.
// Group g = chunks [g*p, (g+1)*p); rank r owns chunk g*p + r, which is slot r of the
// gathered buffer, exactly the slice AllGather and ReduceScatter address.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <c10/util/Exception.h>

#include <algorithm>

#include "chunkmem/runtime.h"

namespace ps::chunkmem {

const at::Tensor& ChunkRuntime::ComputePayload(int chunk) const {
  if (owned(chunk)) return store_.payload(chunk_id(ChunkKind::kCompute, chunk));
  TORCH_INTERNAL_ASSERT(remote_[chunk].defined(), "chunkmem: chunk ", chunk, " of rank ", chunk % world_,
                        " read while its group is not gathered");
  return remote_[chunk];
}

void ChunkRuntime::MakeDeviceRoom(int64_t bytes, int keep, const char* what) {
  store_.ReleaseFinishedCopies();
  if (FitsOnDevice(bytes, ChunkBudgetNow())) return;
  if (reducing_group_ >= 0) {  // a reduction in flight holds a group buffer: finish it first
    FinishReduction();
    if (FitsOnDevice(bytes, ChunkBudgetNow())) return;
  }
  if (EvictDownTo(ChunkBudgetNow() - bytes, keep, bytes)) return;
  if (store_.CanHold(Tier::kDevice, bytes)) return;  // over the traced share, within the store's budget
  TORCH_CHECK(false, "chunkmem: rank ", rank_, ": no device room for ", what, " (", bytes, " bytes): ",
              store_.BytesUsed(Tier::kDevice), " of ", store_.Budget(Tier::kDevice),
              " bytes are held by chunks in use and gathered groups; raise the device budget or lower "
              "chunk.size_elements");
}

void ChunkRuntime::Gather(int group, bool ahead) {
  at::NoGradGuard no_grad;
  const int own = group * world_ + rank_;
  residency_->Fetch(own);  // the gather's input
  const int64_t n = layout_.chunks()[own].capacity_numel;
  const auto dtype = options_.compute_dtype;
  const int64_t bytes = world_ * n * static_cast<int64_t>(c10::elementSize(dtype));
  MakeDeviceRoom(bytes, own, "a gathered chunk group");
  at::Tensor buffer = store_.Borrow(Tier::kDevice, world_ * n, dtype, /*zero=*/false);
  comm::WorkPtr work = options_.comm->AllGather(buffer, store_.payload(chunk_id(ChunkKind::kCompute, own)));
  if (ahead) {
    gather_work_[group] = std::move(work);
    residency_->Pin(own);  // its input is not evicted meanwhile (WaitGather unpins it)
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
  residency_->NoteDeviceBytes();
}

void ChunkRuntime::WaitGather(int group) {
  if (!gather_work_[group]) return;
  comm::WorkPtr work = std::move(gather_work_[group]);
  gather_work_[group] = nullptr;
  residency_->Unpin(group * world_ + rank_);
  work->Wait();
}

void ChunkRuntime::PrefetchGroups() {
  if (!residency_->prefetching()) return;
  // Not across the optimizer step (it changes the owned chunks), nor past the trace.
  const int next = residency_->moment() + 1;
  if (next >= residency_->trace().total_moments()) return;
  for (int c : residency_->trace().ChunksAt(next)) {
    const int group = c / world_;
    if (gathered_[group].defined()) continue;
    Gather(group, /*ahead=*/true);
    ++stats_.group_prefetches;
  }
}

void ChunkRuntime::ReleaseGroup(int group) {
  WaitGather(group);
  for (int k = 0; k < world_; ++k) remote_[group * world_ + k] = at::Tensor();
  store_.GiveBack(Tier::kDevice, gathered_[group]);
}

void ChunkRuntime::ReleaseIdleGroups(int block) {
  const std::vector<int> none;
  const auto& needed = block >= 0 ? groups_of_block_.at(block) : none;
  for (int g = 0; g < static_cast<int>(gathered_.size()); ++g) {
    if (!gathered_[g].defined() || std::find(needed.begin(), needed.end(), g) != needed.end()) continue;
    bool in_use = false;
    for (int k = 0; k < world_; ++k) in_use = in_use || ComputeCount(g * world_ + k) > 0;
    if (!in_use) ReleaseGroup(g);
  }
}

void ChunkRuntime::AddGroupGrad(int index, const at::Tensor& grad) {
  grads_->MarkArrived(index);
  const auto& pl = layout_.placements()[index];
  const int group = pl.chunk_id / world_;
  if (group == reducing_group_) FinishReduction();  // the group's next micro-batch (accumulation)
  at::Tensor& buffer = group_grad_[group];
  const int64_t n = layout_.chunks()[pl.chunk_id].capacity_numel;
  if (!buffer.defined()) {
    MakeDeviceRoom(world_ * n * 4, /*keep=*/-1, "a group's gradient buffer");
    buffer = store_.Borrow(Tier::kDevice, world_ * n, at::kFloat, /*zero=*/true);
    residency_->NoteDeviceBytes();
  }
  const int64_t slot = pl.chunk_id % world_;
  buffer.narrow(0, slot * n + pl.offset_numel, pl.numel).view(shapes_[index]).add_(grad);
}

bool ChunkRuntime::GroupGradsIn(int group) const {
  for (int k = 0; k < world_; ++k) {
    if (!grads_->MicroBatchIn(group * world_ + k)) return false;
  }
  return true;
}

// Started without waiting, so the reduction runs while backward computes the blocks
// before; the previous one is finished first, so at most one is in flight (one group
// buffer beyond the block's: --plan's two-block working set holds it, and MakeDeviceRoom
// finishes it when room is short). Every rank starts and finishes the same reductions in
// the same order (they depend on gradient arrival and block order only).
void ChunkRuntime::ReduceGroupGrads(int group) {
  at::NoGradGuard no_grad;
  FinishReduction();
  const int own = group * world_ + rank_;
  const int64_t n = layout_.chunks()[own].capacity_numel;
  // Averaged in fp32: one rank at p x the micro-batch has the mean of these gradients.
  // In place: the result is this rank's slot of the buffer (NCCL's in-place form).
  const at::Tensor reduced = group_grad_[group].narrow(0, rank_ * n, n);
  reduce_work_ = options_.comm->ReduceScatter(reduced, group_grad_[group], comm::ReduceOp::kAvg);
  reducing_group_ = group;
  ++stats_.group_reductions;
  stats_.comm_bytes += world_ * n * 4;
}

void ChunkRuntime::FinishReduction() {
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
  const at::Tensor reduced = group_grad_[group].narrow(0, rank_ * n, n);
  const at::Tensor& grads = store_.payload(chunk_id(ChunkKind::kGrad, own));
  const at::Tensor source = grads.device() == reduced.device() ? reduced : store_.ToHostSync(reduced);
  if (!options_.grads_in_compute_chunks) {
    grads.add_(source);
    grads_->MarkDirty(own);
  } else {
    // 14/p bytes per parameter: one micro-batch per step, so the averaged gradient
    // overwrites the owned compute slots (rounded once to the compute dtype), as in a
    // one-process run; a parameter without a gradient this step keeps its values. No
    // gather of the group follows in this backward: its gradients are all in.
    const auto& indices = layout_.chunks()[own].param_indices;
    const int64_t end = layout_.chunks()[own].used_numel;
    const bool all = std::all_of(indices.begin(), indices.end(), [this](int index) { return has_grad_[index]; });
    if (all) {  // the gaps between slots are zero in both
      grads.narrow(0, 0, end).copy_(source.narrow(0, 0, end));
    } else {
      for (int index : indices) {
        if (!has_grad_[index]) continue;
        const auto& pl = layout_.placements()[index];
        grads.narrow(0, pl.offset_numel, pl.numel).copy_(source.narrow(0, pl.offset_numel, pl.numel));
      }
    }
  }
  store_.GiveBack(Tier::kDevice, group_grad_[group]);
  GradsFinal(own);  // in the final micro-batch, its owner's gradients are complete
}

}  // namespace ps::chunkmem
