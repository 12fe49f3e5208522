#include "chunkmem/grad_sink.h"

#include <ATen/core/Tensor.h>
#include <ATen/core/grad_mode.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <limits>

#include "chunkmem/tier_plan.h"

namespace ps::chunkmem {

static_assert(kGradSinkSlots == static_cast<int64_t>(GradSink::kMaxFlushesInFlight) + 1,
              "the plan reserves the gradient path's flush slots as PinToDevice does");

GradSink::GradSink(ChunkStore& store, Residency& residency, const ChunkLayout& layout, Chunks chunks,
                   const std::vector<std::vector<int64_t>>& shapes, const std::vector<std::vector<int>>& used_by_blocks,
                   const std::vector<TensorState>& states, bool block_major, std::function<void(int chunk)> grads_final)
    : store_(store),
      residency_(residency),
      layout_(layout),
      chunks_(std::move(chunks)),
      states_(states),
      block_major_(block_major),
      grads_final_(std::move(grads_final)),
      shapes_(shapes) {
  blocks_of_chunk_.resize(layout_.num_chunks());
  for (size_t i = 0; i < used_by_blocks.size(); ++i) {
    auto& blocks = blocks_of_chunk_[layout_.placements()[i].chunk_id];
    blocks.insert(blocks.end(), used_by_blocks[i].begin(), used_by_blocks[i].end());
    for (int b : used_by_blocks[i]) num_blocks_ = std::max(num_blocks_, b + 1);
  }
  num_blocks_ = std::max(num_blocks_, 1);  // block 0 exists even without parameters
  for (auto& blocks : blocks_of_chunk_) {  // ascending, each once: front() is the lowest
    std::sort(blocks.begin(), blocks.end());
    blocks.erase(std::unique(blocks.begin(), blocks.end()), blocks.end());
  }
}

void GradSink::Init() {
  if (!arrived_.empty()) return;
  arrived_.assign(shapes_.size(), false);
  slot_.resize(layout_.num_chunks());
  dirty_.assign(layout_.num_chunks(), false);  // allocated zero-filled
  host_written_.assign(layout_.num_chunks(), false);
}

at::Tensor GradSink::GradView(int index) const {
  const auto& pl = layout_.placements()[index];
  return store_.payload(chunks_.grad_ids[pl.chunk_id]).narrow(0, pl.offset_numel, pl.numel).view(shapes_[index]);
}

bool GradSink::UsedParamsHave(int chunk, const std::vector<bool>& flags) const {
  for (int i : layout_.chunks()[chunk].param_indices) {
    const TensorState s = states_[i];
    if ((s == TensorState::kCompute || s == TensorState::kHoldAfterFwd) && !flags[i]) return false;
  }
  return true;
}

bool GradSink::ChunkComplete(int chunk) const {
  return block_major_ ? blocks_of_chunk_[chunk].front() > backward_block_ : MicroBatchIn(chunk);
}

void GradSink::Add(int index, const at::Tensor& grad) {
  Init();
  const auto& pl = layout_.placements()[index];
  const int chunk = pl.chunk_id;
  dirty_[chunk] = true;
  if (store_.tier(chunks_.grad_ids[chunk]) == Tier::kDevice) {
    GradView(index).add_(grad);  // pinned: in place, on the device
    arrived_[index] = true;
    return;
  }
  if (slot_[chunk].defined() || OpenSlot(chunk)) {
    slot_[chunk].narrow(0, pl.offset_numel, pl.numel).view(shapes_[index]).add_(grad);
    arrived_[index] = true;
    return;
  }
  // No device room for a slot: this gradient alone, after the chunk's earlier flushes
  // (additions stay in micro-batch order).
  ++stats_.grad_host_fallbacks;
  CompleteFlushes(chunk);
  host_written_[chunk] = true;
  GradView(index).add_(store_.ToHostSync(grad.to(store_.dtype(chunks_.grad_ids[chunk]))));
  // Arrived only now: the flushes completed above must not find the chunk complete.
  arrived_[index] = true;
}

void GradSink::FlushIfComplete(int chunk) {
  // Block-major: more of this chunk's gradients may come (the next micro-batch's
  // recompute); its slot is flushed once backward moves below it (EnterBackwardBlock).
  if (!block_major_ && slot_[chunk].defined() && MicroBatchIn(chunk)) FlushSlot(chunk);
}

void GradSink::EnterBackwardBlock(int block) {
  backward_block_ = std::min(backward_block_, block);
  if (slot_.empty()) return;  // no gradient yet
  for (int c = 0; c < layout_.num_chunks(); ++c) {
    if (slot_[c].defined() && ChunkComplete(c)) FlushSlot(c);
  }
}

bool GradSink::OpenSlot(int chunk) {
  const int64_t need = store_.chunk_bytes(chunks_.grad_ids[chunk]);
  auto room = [&] { return residency_.FitsOnDevice(need, residency_.ChunkBudgetNow()); };
  // Room: first from finished copies' slots, then by evicting idle compute chunks.
  while (!room() && !flushes_.empty()) CompleteOldest();
  auto fits = [&] { return room() || residency_.EvictDownTo(residency_.ChunkBudgetNow() - need, /*keep=*/-1, need); };
  // Block-major: slots of chunks the current block does not use (the tied embedding's,
  // open until backward reaches block 0) give way: their partial sums go to the host as
  // whole chunks rather than this chunk's gradients parameter by parameter.
  if (!fits() && !(block_major_ && ReleaseSlots(/*idle_only=*/true) && fits())) return false;
  slot_[chunk] = store_.Borrow(Tier::kDevice, layout_.chunks()[chunk].capacity_numel,
                               store_.dtype(chunks_.grad_ids[chunk]), /*zero=*/true);
  residency_.NoteDeviceBytes();
  return true;
}

void GradSink::FlushSlot(int chunk) {
  while (flushes_.size() >= kMaxFlushesInFlight) CompleteOldest();
  Flush flush;
  flush.chunk = chunk;
  flush.slot = std::move(slot_[chunk]);
  slot_[chunk] = at::Tensor();
  const at::Tensor& grads = store_.payload(chunks_.grad_ids[chunk]);
  at::Tensor dst = grads;
  // The grad chunk is all zero until its first flush of the step (BeginStep; nothing
  // else writes a host grad chunk before): copy into it, no add. A second flush of the
  // chunk this step lands beside it and is added when complete, in order.
  const bool first = std::none_of(flushes_.begin(), flushes_.end(), [&](const Flush& f) { return f.chunk == chunk; }) &&
                     !host_written_[chunk];
  if (!first) {
    const int64_t bytes = store_.chunk_bytes(chunks_.grad_ids[chunk]);
    while (!store_.CanHold(Tier::kHost, bytes) && !flushes_.empty()) CompleteOldest();
    flush.landing = store_.Borrow(Tier::kHost, grads.numel(), grads.scalar_type(), /*zero=*/false);
    dst = flush.landing;
  }
  host_written_[chunk] = true;
  flush.ticket = store_.CopyToHost(dst, flush.slot);
  flushes_.push_back(std::move(flush));
  ++stats_.grad_flushes;
}

void GradSink::CompleteOldest() {
  Flush flush = std::move(flushes_.front());
  flushes_.pop_front();
  if (flush.ticket) store_.Wait(*flush.ticket);
  if (flush.landing.defined()) {
    store_.payload(chunks_.grad_ids[flush.chunk]).add_(flush.landing);  // one host add per chunk
    store_.GiveBack(Tier::kHost, flush.landing);
  }
  store_.GiveBack(Tier::kDevice, flush.slot);
  // The last flush of a chunk whose gradients are all in.
  const int chunk = flush.chunk;
  if (!slot_[chunk].defined() && ChunkComplete(chunk) &&
      std::none_of(flushes_.begin(), flushes_.end(), [chunk](const Flush& f) { return f.chunk == chunk; })) {
    grads_final_(chunk);
  }
}

void GradSink::CompleteFlushes(int chunk) {
  int last = -1;
  for (int k = 0; k < static_cast<int>(flushes_.size()); ++k) {
    if (chunk < 0 || flushes_[k].chunk == chunk) last = k;
  }
  for (int k = 0; k <= last; ++k) CompleteOldest();
}

bool GradSink::GiveWay(const std::function<bool()>& evict) {
  if (evict()) return true;
  if (block_major_) {
    // First the slots already on their way to the host, then whole slots of chunks the
    // current block does not use; only then the current block's partial sums.
    if (!flushes_.empty()) {
      CompleteFlushes(-1);
      if (evict()) return true;
    }
    if (ReleaseSlots(/*idle_only=*/true) && evict()) return true;
  }
  return ReleaseSlots() && evict();
}

bool GradSink::ReleaseSlots(bool idle_only) {
  if (slot_.empty()) return false;
  bool released = !flushes_.empty();
  for (int c = 0; c < layout_.num_chunks(); ++c) {
    if (!slot_[c].defined()) continue;
    const auto& blocks = blocks_of_chunk_[c];
    if (idle_only && std::binary_search(blocks.begin(), blocks.end(), backward_block_)) continue;  // in use now
    FlushSlot(c);  // a partial sum: the chunk's later gradients open a new slot
    released = true;
  }
  CompleteFlushes(-1);
  return released;
}

void GradSink::FinishBackward() {
  backward_block_ = -1;  // block-major: backward is over, every chunk's gradients are in
  if (slot_.empty()) return;
  for (int c = 0; c < layout_.num_chunks(); ++c) {
    if (slot_[c].defined()) FlushSlot(c);  // parameters used without a gradient kept it open
  }
  CompleteFlushes(-1);
  std::fill(arrived_.begin(), arrived_.end(), false);
}

void GradSink::BeginStep(bool warmed_up) {
  at::NoGradGuard no_grad;
  backward_block_ = std::numeric_limits<int>::max();  // block-major: backward has not started
  TORCH_INTERNAL_ASSERT(flushes_.empty(), "chunkmem: ZeroGrads with gradient copies in flight");
  Init();
  for (int c = 0; c < layout_.num_chunks(); ++c) {
    // Untouched since the last zeroing (or since allocation, zero-filled): no memset,
    // which on the host costs as much as a copy of the chunk. A device grad chunk is
    // zeroed anyway (cheap there, and the optimizer's fused op reads it in place).
    const int gid = chunks_.grad_ids[c];
    if (gid < 0) continue;
    if (dirty_[c] || store_.tier(gid) == Tier::kDevice) store_.payload(gid).zero_();
  }
  std::fill(dirty_.begin(), dirty_.end(), false);
  std::fill(host_written_.begin(), host_written_.end(), false);
  if (warmed_up) PinToDevice();
}

void GradSink::PinToDevice() {
  // Room on the device beyond what it must keep for compute chunks: the lowest chunk
  // budget less the traced working set and what is pinned already (optimizer state).
  int64_t pinned = store_.BytesUsed(Tier::kDevice);
  int64_t max_grad_bytes = 0;
  bool host_updated = false;  // chunks updated on the host keep staging: room for their slots
  std::vector<int> candidates;  // chunks updated on the device whose gradient chunk is not there yet
  std::vector<int64_t> candidate_bytes;
  for (int c = 0; c < layout_.num_chunks(); ++c) {
    if (residency_.on_device(c)) pinned -= residency_.chunk_bytes(c);  // compute chunks, frozen ones too
    const int gid = chunks_.grad_ids[c];
    if (gid < 0) continue;
    max_grad_bytes = std::max(max_grad_bytes, GradChunkBytes(c));
    if (store_.tier(chunks_.adam_m_ids[c]) != Tier::kDevice) {
      host_updated = true;
    } else if (store_.tier(gid) != Tier::kDevice) {  // the optimizer reads it on the device
      candidates.push_back(c);
      candidate_bytes.push_back(store_.chunk_bytes(gid));
    }
  }
  // Block-major: every chunk of a block keeps its slot open through the block's micro-batches.
  int64_t slots = kGradSinkSlots;  // kMaxFlushesInFlight + 1 (asserted above)
  if (block_major_) {
    std::vector<int64_t> chunks_of_block(num_blocks_, 0);
    for (int c = 0; c < layout_.num_chunks(); ++c) {
      if (chunks_.grad_ids[c] < 0) continue;  // no gradient slot (frozen; another rank's)
      for (int b : blocks_of_chunk_[c]) ++chunks_of_block[b];
    }
    slots += *std::max_element(chunks_of_block.begin(), chunks_of_block.end());
  }
  const int64_t room = residency_.MinChunkBudgetBytes() - residency_.PeakWorkingSetBytes() - pinned;
  const std::vector<bool> keep = KeepDeviceGrads(room, slots * max_grad_bytes, host_updated, candidate_bytes);
  for (size_t i = 0; i < candidates.size(); ++i) {
    const int gid = chunks_.grad_ids[candidates[i]];
    if (!keep[i] || !residency_.FreeDeviceBytes(candidate_bytes[i])) continue;
    store_.Move(gid, Tier::kDevice, /*long_lived=*/true);
    ++stats_.grad_chunks_on_device;
  }
  residency_.NoteDeviceBytes();
}

}  // namespace ps::chunkmem
