// ChunkRuntime's gradient path: where each parameter's gradient goes when it arrives,
// and how the fp32 grad chunks reach the optimizer (docs/chunkmem.md, "Gradients").
//
// Reuse (grads_in_compute_chunks): the gradient overwrites the parameter's compute slot.
// fp32 grad chunks, by the grad chunk's home:
// - device (pinned after warm-up with optimizer state that updates there): the
//   gradient is added into it in place;
// - host: the gradient is added into the chunk's device staging slot; when every
//   parameter of the chunk that this micro-batch uses has its gradient (or at
//   AfterBackward), the slot goes to the host in one copy, straight into the grad chunk
//   while it is zero this step, else into a landing buffer that is added on completion.
//   Copies are asynchronous on the store's copy engine when there is one; at most
//   kMaxGradFlushesInFlight are in flight; AfterBackward waits for all.
// - no device room for a slot: the gradient alone is copied and added (counted).
// Called on the thread that runs backward (see runtime.h), never concurrently.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <functional>
#include <limits>

#include "chunkmem/runtime.h"

namespace ps::chunkmem {

int64_t ChunkRuntime::GradChunkBytes(int chunk) const {
  return options_.grads_in_compute_chunks ? 0 : store_.chunk_bytes(chunk_id(ChunkKind::kGrad, chunk));
}

void ChunkRuntime::OnGradAccumulated(int index) {
  auto& param = params_[index].tensor;
  at::NoGradGuard no_grad;
  at::Tensor grad = param.grad();
  TORCH_INTERNAL_ASSERT(grad.defined(), "grad hook without a gradient for ", params_[index].name);
  if (reducing_group_ >= 0) overlapped_since_reduce_ = true;
  if (zero()) {
    AddGroupGrad(index, grad);
  } else if (options_.grads_in_compute_chunks) {
    // The parameter's last backward use is done: its slot now holds its gradient.
    View(ChunkKind::kCompute, index).copy_(grad);
  } else {
    AddGrad(index, grad);
  }
  param.mutable_grad() = at::Tensor();
  has_grad_[index] = true;
  if (states_[index] == TensorState::kCompute) Release(index, TensorState::kHoldAfterBwd);
  const int chunk = layout_.placements()[index].chunk_id;
  if (options_.grads_in_compute_chunks && !zero()) {  // the slots are the gradients: final once all are in
    if (final_micro_batch_ && UsedParamsHave(chunk, has_grad_)) GradsFinal(chunk);
    return;
  }
  if (zero()) {
    const int group = chunk / world_;
    if (group_grad_[group].defined() && GroupGradsIn(group)) ReduceGroupGrads(group);
    return;
  }
  // Block-major: more of this chunk's gradients may come (the next micro-batch's
  // recompute); its slot is flushed once backward moves below it (FlushChunksAbove).
  if (!options_.block_major_backward && grad_slot_[chunk].defined() && GradsOfMicroBatchIn(chunk)) {
    FlushGradSlot(chunk);
  }
}

bool ChunkRuntime::ChunkGradsComplete(int chunk) const {
  return options_.block_major_backward ? blocks_of_chunk_[chunk].front() > backward_block_
                                       : GradsOfMicroBatchIn(chunk);
}

void ChunkRuntime::FlushChunksAbove(int block) {
  backward_block_ = std::min(backward_block_, block);
  if (grad_slot_.empty()) return;  // no gradient yet
  for (int c = 0; c < layout_.num_chunks(); ++c) {
    if (grad_slot_[c].defined() && ChunkGradsComplete(c)) FlushGradSlot(c);
  }
}

void ChunkRuntime::InitGradState() {
  if (!grad_slot_.empty()) return;
  grad_arrived_.assign(params_.size(), false);
  grad_slot_.resize(layout_.num_chunks());
  grad_dirty_.assign(layout_.num_chunks(), false);  // allocated zero-filled
  host_grad_written_.assign(layout_.num_chunks(), false);
}

void ChunkRuntime::AddGrad(int index, const at::Tensor& grad) {
  InitGradState();
  const auto& pl = layout_.placements()[index];
  const int chunk = pl.chunk_id;
  grad_dirty_[chunk] = true;
  if (store_.tier(chunk_id(ChunkKind::kGrad, chunk)) == Tier::kDevice) {
    View(ChunkKind::kGrad, index).add_(grad);  // pinned: in place, on the device
    grad_arrived_[index] = true;
    return;
  }
  if (grad_slot_[chunk].defined() || OpenGradSlot(chunk)) {
    grad_slot_[chunk].narrow(0, pl.offset_numel, pl.numel).view(shapes_[index]).add_(grad);
    grad_arrived_[index] = true;
    return;
  }
  // No device room for a slot: this gradient alone, after the chunk's earlier flushes
  // (additions stay in micro-batch order).
  ++stats_.grad_host_fallbacks;
  CompleteGradFlushes(chunk);
  host_grad_written_[chunk] = true;
  View(ChunkKind::kGrad, index).add_(store_.ToHostSync(grad.to(at::kFloat)));
  // Arrived only now: the flushes completed above must not find the chunk complete.
  grad_arrived_[index] = true;
}

bool ChunkRuntime::OpenGradSlot(int chunk) {
  const int gid = chunk_id(ChunkKind::kGrad, chunk);
  const int64_t need = store_.chunk_bytes(gid);
  // Room: first from finished copies' slots, then by evicting idle compute chunks.
  while (!FitsOnDevice(need, ChunkBudgetNow()) && !grad_flushes_.empty()) CompleteOldestGradFlush();
  auto fits = [&] { return FitsOnDevice(need, ChunkBudgetNow()) || EvictDownTo(ChunkBudgetNow() - need, /*keep=*/-1, need); };
  // Block-major: slots of chunks the current block does not use (the tied embedding's,
  // open until backward reaches block 0) give way: their partial sums go to the host as
  // whole chunks rather than this chunk's gradients parameter by parameter.
  if (!fits() && !(options_.block_major_backward && ReleaseGradSlots(/*idle_only=*/true) && fits())) return false;
  grad_slot_[chunk] = store_.Borrow(Tier::kDevice, layout_.chunks()[chunk].capacity_numel, at::kFloat, /*zero=*/true);
  residency_->NoteDeviceBytes();
  return true;
}

void ChunkRuntime::GradsFinal(int chunk) {
  if (final_micro_batch_ && on_grads_final_) on_grads_final_(chunk);
}

bool ChunkRuntime::UsedParamsHave(int chunk, const std::vector<bool>& arrived) const {
  for (int i : layout_.chunks()[chunk].param_indices) {
    const TensorState s = states_[i];
    if ((s == TensorState::kCompute || s == TensorState::kHoldAfterFwd) && !arrived[i]) return false;
  }
  return true;
}

void ChunkRuntime::FlushGradSlot(int chunk) {
  while (grad_flushes_.size() >= kMaxGradFlushesInFlight) CompleteOldestGradFlush();
  GradFlush flush;
  flush.chunk = chunk;
  flush.slot = std::move(grad_slot_[chunk]);
  grad_slot_[chunk] = at::Tensor();
  const at::Tensor& grads = store_.payload(chunk_id(ChunkKind::kGrad, chunk));
  at::Tensor dst = grads;
  // The grad chunk is all zero until its first flush of the step (ZeroGrads; nothing
  // else writes a host grad chunk before): copy into it, no add. A second flush of the
  // chunk this step lands beside it and is added when complete, in order.
  const bool first = std::none_of(grad_flushes_.begin(), grad_flushes_.end(),
                                  [&](const GradFlush& f) { return f.chunk == chunk; }) &&
                     !host_grad_written_[chunk];
  if (!first) {
    const int64_t bytes = store_.chunk_bytes(chunk_id(ChunkKind::kGrad, chunk));
    while (!store_.CanHold(Tier::kHost, bytes) && !grad_flushes_.empty()) CompleteOldestGradFlush();
    flush.landing = store_.Borrow(Tier::kHost, grads.numel(), at::kFloat, /*zero=*/false);
    dst = flush.landing;
  }
  host_grad_written_[chunk] = true;
  flush.ticket = store_.CopyToHost(dst, flush.slot);
  grad_flushes_.push_back(std::move(flush));
  ++stats_.grad_flushes;
}

void ChunkRuntime::CompleteOldestGradFlush() {
  GradFlush flush = std::move(grad_flushes_.front());
  grad_flushes_.pop_front();
  if (flush.ticket) store_.Wait(*flush.ticket);
  if (flush.landing.defined()) {
    store_.payload(chunk_id(ChunkKind::kGrad, flush.chunk)).add_(flush.landing);  // one host add per chunk
    store_.GiveBack(Tier::kHost, flush.landing);
  }
  store_.GiveBack(Tier::kDevice, flush.slot);
  // The last flush of a chunk whose gradients of the final micro-batch are all in.
  const int chunk = flush.chunk;
  if (final_micro_batch_ && !grad_slot_[chunk].defined() && ChunkGradsComplete(chunk) &&
      std::none_of(grad_flushes_.begin(), grad_flushes_.end(), [chunk](const GradFlush& f) { return f.chunk == chunk; })) {
    GradsFinal(chunk);
  }
}

void ChunkRuntime::CompleteGradFlushes(int chunk) {
  int last = -1;
  for (int k = 0; k < static_cast<int>(grad_flushes_.size()); ++k) {
    if (chunk < 0 || grad_flushes_[k].chunk == chunk) last = k;
  }
  for (int k = 0; k <= last; ++k) CompleteOldestGradFlush();
}

bool ChunkRuntime::EvictOrGiveWay(const std::function<bool()>& evict) {
  if (evict()) return true;
  if (options_.block_major_backward) {
    // First the slots already on their way to the host, then whole slots of chunks the
    // current block does not use; only then the current block's partial sums.
    if (!grad_flushes_.empty()) {
      CompleteGradFlushes(-1);
      if (evict()) return true;
    }
    if (ReleaseGradSlots(/*idle_only=*/true) && evict()) return true;
  }
  return ReleaseGradSlots() && evict();
}

bool ChunkRuntime::ReleaseGradSlots(bool idle_only) {
  if (grad_slot_.empty()) return false;
  bool released = !grad_flushes_.empty();
  for (int c = 0; c < layout_.num_chunks(); ++c) {
    if (!grad_slot_[c].defined()) continue;
    const auto& blocks = blocks_of_chunk_[c];
    if (idle_only && std::binary_search(blocks.begin(), blocks.end(), backward_block_)) continue;  // in use now
    FlushGradSlot(c);  // a partial sum: the chunk's later gradients open a new slot
    released = true;
  }
  CompleteGradFlushes(-1);
  return released;
}

void ChunkRuntime::AfterBackward() {
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (states_[i] == TensorState::kCompute) Release(static_cast<int>(i), TensorState::kHoldAfterBwd);
  }
  backward_block_ = -1;  // block-major: backward is over, every chunk's gradients are in
  if (grad_slot_.empty()) return;  // no fp32 gradient arrived yet (or gradients reuse the slots)
  if (zero()) {  // groups whose parameters were used without a gradient kept their buffer open
    for (int g = 0; g < static_cast<int>(group_grad_.size()); ++g) {
      if (group_grad_[g].defined() && g != reducing_group_) ReduceGroupGrads(g);
    }
    FinishReduction();  // every reduction is in before the optimizer reads the grad chunks
  }
  for (int c = 0; c < layout_.num_chunks(); ++c) {
    if (grad_slot_[c].defined()) FlushGradSlot(c);  // parameters used without a gradient kept it open
  }
  CompleteGradFlushes(-1);
  std::fill(grad_arrived_.begin(), grad_arrived_.end(), false);
}

void ChunkRuntime::PinGradChunks() {
  // Room on the device beyond what it must keep for compute chunks: the lowest chunk
  // budget less the traced working set and what is pinned already (optimizer state).
  int64_t pinned = store_.BytesUsed(Tier::kDevice);
  int64_t max_grad_bytes = 0;
  for (int c = 0; c < layout_.num_chunks(); ++c) {
    if (!owned(c)) continue;
    const int cid = chunk_id(ChunkKind::kCompute, c);
    if (store_.tier(cid) == Tier::kDevice) pinned -= store_.chunk_bytes(cid);
    max_grad_bytes = std::max(max_grad_bytes, GradChunkBytes(c));
  }
  // Chunks updated on the host keep staging: leave room for the slots in flight.
  bool any_host_updated = false;
  for (int c = 0; c < layout_.num_chunks(); ++c) {
    any_host_updated = any_host_updated || (owned(c) && store_.tier(chunk_id(ChunkKind::kAdamM, c)) != Tier::kDevice);
  }
  // Block-major: every chunk of a block keeps its slot open through the block's micro-batches.
  int64_t slots = static_cast<int64_t>(kMaxGradFlushesInFlight + 1);
  if (options_.block_major_backward) {
    std::vector<int64_t> chunks_of_block(params_of_block_.size(), 0);
    for (const auto& blocks : blocks_of_chunk_) {
      for (int b : blocks) ++chunks_of_block[b];
    }
    slots += *std::max_element(chunks_of_block.begin(), chunks_of_block.end());
  }
  const int64_t reserve = any_host_updated ? slots * max_grad_bytes : 0;
  int64_t room = MinChunkBudgetBytes() - PeakWorkingSetBytes() - pinned - reserve;
  for (int c = 0; c < layout_.num_chunks(); ++c) {
    if (!owned(c)) continue;
    const int gid = chunk_id(ChunkKind::kGrad, c);
    // Only where the optimizer reads it on the device (its Adam state is there).
    if (store_.tier(chunk_id(ChunkKind::kAdamM, c)) != Tier::kDevice || store_.tier(gid) == Tier::kDevice) continue;
    const int64_t bytes = store_.chunk_bytes(gid);
    if (bytes > room || !FreeDeviceBytes(bytes)) continue;
    store_.Move(gid, Tier::kDevice, /*long_lived=*/true);
    room -= bytes;
    ++stats_.grad_chunks_on_device;
  }
  residency_->NoteDeviceBytes();
}

void ChunkRuntime::ZeroGrads() {
  at::NoGradGuard no_grad;
  backward_block_ = std::numeric_limits<int>::max();  // block-major: backward has not started
  if (!options_.grads_in_compute_chunks) {  // reused slots are overwritten, not accumulated
    TORCH_INTERNAL_ASSERT(grad_flushes_.empty(), "chunkmem: ZeroGrads with gradient copies in flight");
    InitGradState();
    for (int c = 0; c < layout_.num_chunks(); ++c) {
      // Untouched since the last zeroing (or since allocation, zero-filled): no memset,
      // which on the host costs as much as a copy of the chunk. A device grad chunk is
      // zeroed anyway (cheap there, and the optimizer's fused op reads it in place).
      if (!owned(c)) continue;
      const int gid = chunk_id(ChunkKind::kGrad, c);
      if (grad_dirty_[c] || store_.tier(gid) == Tier::kDevice) store_.payload(gid).zero_();
    }
    std::fill(grad_dirty_.begin(), grad_dirty_.end(), false);
    std::fill(host_grad_written_.begin(), host_grad_written_.end(), false);
    if (warmed_up()) PinGradChunks();
  }
  std::fill(has_grad_.begin(), has_grad_.end(), false);
}

}  // namespace ps::chunkmem
