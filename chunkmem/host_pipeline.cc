#include "chunkmem/host_pipeline.h"

#include <c10/util/Exception.h>

#include <utility>

namespace ps::chunkmem {

const char* ToString(HostAccess access) {
  switch (access) {
    case HostAccess::kInPlace: return "in place";
    case HostAccess::kBring: return "brought to the host";
    case HostAccess::kStaged: return "staged";
  }
  return "?";
}

HostPipeline::HostPipeline(OptimizerMoves& moves, const HostPipelineSettings& settings)
    : moves_(moves), settings_(settings) {}

HostAccess HostPipeline::AccessFor(int chunk) const {
  if (!settings_.device_unreadable || !moves_.on_device(chunk)) return HostAccess::kInPlace;
  return settings_.compute_write_only ? HostAccess::kStaged : HostAccess::kBring;
}

bool HostPipeline::BorrowStaging(at::Tensor (&staging)[2]) {
  for (at::Tensor& b : staging) b = moves_.TryBorrowHost(settings_.staging_numel, settings_.compute_dtype);
  if (staging[0].defined() && staging[1].defined()) return true;
  for (at::Tensor& b : staging) moves_.GiveBackHost(b);  // no room for both: move chunks instead
  return false;
}

void HostPipeline::RunStaged(int chunk, const at::Tensor& staging, Tickets& copies, const AddUpdate& add,
                             const RunUpdates& run) {
  Wait(copies);  // the copies of the chunk before the last one, out of this buffer
  const std::vector<ElementRange> written = add(chunk, &staging);
  run();
  WriteStaged(chunk, staging, written, copies);  // overlaps the next chunk's update
}

void HostPipeline::Run(const std::vector<int>& chunks, const AddUpdate& add, const RunUpdates& run) {
  const size_t n = chunks.size();
  std::vector<bool> remote(n, false);
  bool any_remote = false;
  std::vector<int> nvme_order;  // the NVMe tier's chunks, in update order
  for (size_t k = 0; k < n; ++k) {
    remote[k] = AccessFor(chunks[k]) != HostAccess::kInPlace;
    any_remote = any_remote || remote[k];
    if (settings_.nvme != nullptr && settings_.nvme->on_nvme(chunks[k])) nvme_order.push_back(chunks[k]);
  }
  if (!nvme_order.empty()) settings_.nvme->BeginStep(nvme_order);
  const bool per_chunk = any_remote || !nvme_order.empty();  // each update runs before the next chunk's
  // The buffers go back on every path, an exception's included (a copy still reading
  // one keeps its memory alive through its ticket).
  struct Staging {
    OptimizerMoves& moves;
    at::Tensor buffer[2];
    ~Staging() {
      for (at::Tensor& b : buffer) moves.GiveBackHost(b);
    }
  } staging{moves_};
  const bool stage = any_remote && settings_.compute_write_only && BorrowStaging(staging.buffer);
  Tickets staged_copies[2];
  std::vector<bool> move(n, false);
  for (size_t k = 0; k < n; ++k) move[k] = remote[k] && !stage;
  for (size_t k = 0; k < n; ++k) {
    const int chunk = chunks[k];
    const bool nvme = settings_.nvme != nullptr && settings_.nvme->on_nvme(chunk);
    if (nvme) settings_.nvme->Acquire(chunk);  // its state mounted (read ahead)
    struct AbandonOnThrow {  // an update that fails half-way leaves the file's state, not the slot's
      NvmeState* nvme;
      int chunk;
      ~AbandonOnThrow() {
        if (nvme != nullptr) nvme->Abandon(chunk);
      }
    } hold{nvme ? settings_.nvme : nullptr, chunk};
    if (remote[k] && stage) {
      RunStaged(chunk, staging.buffer[k % 2], staged_copies[k % 2], add, run);
    } else {
      if (move[k]) moves_.ToHost(chunk);
      if (k + 1 < n && move[k + 1]) moves_.ToHost(chunks[k + 1]);  // on its way during this update
      add(chunk, nullptr);
      if (per_chunk) {  // pipelined: update this chunk while the next one's copy (or read) runs
        run();
        if (move[k]) moves_.ReturnToDeviceIfRoom(chunk);  // overlaps the next chunk's update
      }
    }
    hold.nvme = nullptr;
    if (nvme) settings_.nvme->Release(chunk, /*written=*/true);  // written behind the next update
  }
  run();  // all at once when nothing had to move
  for (Tickets& copies : staged_copies) Wait(copies);  // the next forward reads the device chunks
}

bool HostPipeline::CanHold(int chunk, HostAccess access) const {
  if (access == HostAccess::kStaged) return true;  // nothing is touched until the step
  // A pinned chunk (a ZeRO gather's input in flight, or held already) cannot move, and
  // an update in place would write what its pinner reads.
  if (moves_.pinned(chunk)) return false;
  return access != HostAccess::kBring || !moves_.in_use(chunk);
}

std::shared_ptr<CopyTicket> HostPipeline::Hold(int chunk, HostAccess access) {
  TORCH_INTERNAL_ASSERT(CanHold(chunk, access), "chunkmem: chunk ", chunk, " is in use; it cannot be held");
  std::shared_ptr<CopyTicket> copy;
  if (access == HostAccess::kBring) {
    copy = moves_.SendToHost(chunk);
    brought_.push_back(chunk);
  }
  if (access != HostAccess::kStaged) {
    moves_.Pin(chunk);
    pinned_.push_back(chunk);
  }
  return copy;
}

void HostPipeline::UnpinHeld() {
  for (int chunk : pinned_) moves_.Unpin(chunk);
  pinned_.clear();
}

void HostPipeline::ReturnHeld() {
  // As Run does: back where backward left them, when they fit now.
  for (int chunk : brought_) moves_.ReturnToDeviceIfRoom(chunk);
  brought_.clear();
}

void HostPipeline::WriteStaged(int chunk, const at::Tensor& staging, const std::vector<ElementRange>& written,
                               Tickets& tickets) {
  int64_t begin = -1, end = -1;  // the current run of adjacent ranges
  auto flush = [&] {
    if (begin < 0) return;
    auto ticket = moves_.WriteCompute(chunk, begin, staging.narrow(0, begin, end - begin));
    if (ticket) tickets.push_back(std::move(ticket));
    begin = end = -1;
  };
  for (const ElementRange& r : written) {
    if (begin >= 0 && r.offset_numel != end) flush();  // an alignment gap or a parameter not written
    if (begin < 0) begin = r.offset_numel;
    end = r.offset_numel + r.numel;
  }
  flush();
}

void HostPipeline::Wait(Tickets& tickets) {
  for (auto& t : tickets) moves_.Wait(*t);
  tickets.clear();
}

}  // namespace ps::chunkmem
