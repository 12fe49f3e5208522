#include "chunkmem/nvme_state.h"

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <utility>

namespace ps::chunkmem {

NvmeState::NvmeState(ChunkStore& store, std::vector<NvmeChunkIds> chunks, const NvmeSettings& settings)
    : store_(store), ids_(std::move(chunks)) {
  TORCH_CHECK(settings.ring_slots >= 2, "chunk.nvme_ring_slots must be at least 2, got ", settings.ring_slots);
  int64_t at = 0, largest = 0, on_tier = 0;
  for (const NvmeChunkIds& ids : ids_) {
    if (ids[kNvmeM] < 0) {  // not on the tier
      parts_.emplace_back();
      extents_.push_back({});
      continue;
    }
    const int64_t master = ids[kNvmeMaster] >= 0 ? store_.chunk_bytes(ids[kNvmeMaster]) : 0;
    parts_.push_back(NvmePartsOf(master, store_.chunk_bytes(ids[kNvmeM])));
    TORCH_INTERNAL_ASSERT(store_.chunk_bytes(ids[kNvmeV]) == parts_.back().bytes[kNvmeV], "NvmeState: m and v differ in size");
    extents_.push_back({at, parts_.back().extent_bytes});
    at += parts_.back().extent_bytes;
    largest = std::max(largest, parts_.back().extent_bytes);
    ++on_tier;
  }
  TORCH_CHECK(largest > 0, "NvmeState: no chunk on the NVMe tier");
  const int64_t slots = NvmeRingSlots(settings.ring_slots, on_tier);
  const int64_t ring = NvmeRingBytes(slots, largest);
  TORCH_CHECK(store_.BytesUsed(Tier::kHost) + ring <= store_.Budget(Tier::kHost), "the NVMe tier's ring (", ring,
              " bytes) does not fit the host budget");
  file_ = std::make_unique<NvmeFile>(settings.dir, at, settings.pieces_in_flight, settings.piece_bytes);
  try {
    for (int64_t s = 0; s < slots; ++s) {
      TORCH_CHECK(store_.CanHold(Tier::kHost, largest + kNvmeAlignBytes), "the NVMe tier's ring (", ring,
                  " bytes) does not fit the host budget");
      borrowed_.push_back(store_.Borrow(Tier::kHost, largest + kNvmeAlignBytes, at::kByte, /*zero=*/false));
      const auto address = reinterpret_cast<uintptr_t>(borrowed_.back().data_ptr());
      const int64_t skip = static_cast<int64_t>((kNvmeAlignBytes - address % kNvmeAlignBytes) % kNvmeAlignBytes);
      slots_.push_back(borrowed_.back().narrow(0, skip, largest));
    }
    std::vector<void*> buffers;
    for (const at::Tensor& slot : slots_) buffers.push_back(slot.data_ptr());
    ring_ = std::make_unique<NvmeRing>(*file_, extents_, buffers);
  } catch (...) {  // the constructor fails: what it borrowed goes back
    for (at::Tensor& t : borrowed_) store_.GiveBack(Tier::kHost, t);
    throw;
  }
  for (const NvmeChunkIds& ids : ids_) {  // last: nothing above can fail after it
    for (int id : ids) {
      if (id >= 0) store_.MarkNvme(id);
    }
  }
}

NvmeState::~NvmeState() {
  for (int chunk = 0; chunk < static_cast<int>(ids_.size()); ++chunk) Unmount(chunk);  // one an exception left
  ring_.reset();  // waits for the writes in flight
  for (at::Tensor& t : borrowed_) store_.GiveBack(Tier::kHost, t);
}

int64_t NvmeState::ring_bytes() const {
  int64_t bytes = 0;
  for (const at::Tensor& t : borrowed_) bytes += t.numel();
  return bytes;
}

void NvmeState::Acquire(int chunk, bool read) {
  TORCH_CHECK(on_nvme(chunk), "NvmeState: chunk ", chunk, " is not on the NVMe tier");
  void* buffer = ring_->Acquire(chunk, read);
  const auto slot = std::find_if(slots_.begin(), slots_.end(), [&](const at::Tensor& t) { return t.data_ptr() == buffer; });
  TORCH_INTERNAL_ASSERT(slot != slots_.end(), "NvmeState: the ring returned a buffer that is not a slot");
  const NvmeParts& parts = parts_[chunk];
  for (int k = 0; k < 3; ++k) {
    const int id = ids_[chunk][k];
    if (id < 0) continue;
    store_.Mount(id, slot->narrow(0, parts.offset_bytes[k], parts.bytes[k]).view(store_.dtype(id)));
  }
}

void NvmeState::Unmount(int chunk) {
  for (int id : ids_.at(chunk)) {
    if (id >= 0 && store_.on_nvme(id)) store_.Unmount(id);  // on_nvme: marked (the constructor finished)
  }
}

void NvmeState::Release(int chunk, bool written) {
  Unmount(chunk);
  ring_->Release(chunk, written);
}

void NvmeState::Abandon(int chunk) {
  Unmount(chunk);
  ring_->Abandon(chunk);
}

}  // namespace ps::chunkmem
