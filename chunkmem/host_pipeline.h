// HostPipeline: brings the chunks the optimizer updates on the host to where the CPU
// kernels can read them, and puts them back afterwards. The optimizer only runs Adam
// over the chunk views it is handed; every move its updates need goes through here
// (and from here through OptimizerMoves, i.e. the Residency).
//
// End of a step (Run), for the host-updated chunks in order. A compute chunk on a
// device the kernels cannot read (CUDA; the simulated tier in tests that take the CUDA
// path) is handled one of two ways:
// - moved: chunk k+1 starts its way to the host (asynchronously with a copy engine)
//   before chunk k's update runs, and chunk k goes back to the device after its update
//   if it fits the budget without evicting anything (else it stays on the host for the
//   next forward's prefetch);
// - staged, when the update only writes the compute chunk (bf16/fp16 with fp32 grad
//   chunks: the new parameters): it stays on the device; the update writes into a host
//   staging buffer (two, alternating, borrowed for the step; when the host tier cannot
//   lend both, chunks are moved instead) and the written ranges are copied in, one copy
//   per run of adjacent ranges, overlapping the next chunk's update.
// A chunk whose optimizer state is on the NVMe tier is mounted (NvmeState::Acquire: its
// read went ahead in this order) before its update and written back after it.
// Without such chunks every update is queued and run once, at the end.
// Ahead of the step (speculation, during backward): Hold brings a chunk's compute
// chunk to the host on the copy engine and pins it while another thread updates it;
// UnpinHeld and ReturnHeld end that after the step.
// Training thread only (and the backward thread, which never overlaps it).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "chunkmem/copy_engine.h"
#include "chunkmem/nvme_state.h"
#include "chunkmem/optimizer_moves.h"

namespace ps::chunkmem {

struct HostPipelineSettings {
  // The CPU kernels cannot read device-tier payloads (CUDA, or a test taking the CUDA
  // path on the simulated tier): such compute chunks are moved or staged.
  bool device_unreadable = false;
  // The update only writes the compute chunk (bf16/fp16 with fp32 grad chunks): a
  // device-resident one is staged instead of moved.
  bool compute_write_only = false;
  at::ScalarType compute_dtype = at::kFloat;
  int64_t staging_numel = 0;  // a staging buffer's elements: the largest chunk's capacity
  // The NVMe tier (not owned; null: none): a chunk whose state is there is mounted for
  // its update and written back after it, the reads going ahead in the update order.
  NvmeState* nvme = nullptr;
};

// Elements [offset_numel, offset_numel + numel) of a chunk.
struct ElementRange {
  int64_t offset_numel = 0;
  int64_t numel = 0;
};

// How a host update reaches a chunk's compute payload now.
enum class HostAccess {
  kInPlace,  // on the host (or a device tier the kernels read): updated where it is
  kBring,    // on a device the kernels cannot read: comes to the host first
  kStaged,   // stays on the device: the update writes a host buffer that is copied in
};
const char* ToString(HostAccess access);

class HostPipeline {
 public:
  using Tickets = std::vector<std::shared_ptr<CopyTicket>>;
  // Queues the update of `chunk`; `staging` (null: the compute chunk is in host memory)
  // is where its new parameters go, at their offsets in the chunk. Returns the ranges
  // it writes there, ascending.
  using AddUpdate = std::function<std::vector<ElementRange>(int chunk, const at::Tensor* staging)>;
  // Runs every update queued so far; they are complete when it returns.
  using RunUpdates = std::function<void()>;

  // `moves` outlives the pipeline.
  HostPipeline(OptimizerMoves& moves, const HostPipelineSettings& settings);

  // The host updates of `chunks`, in order, with the moves around them (above). When it
  // returns every update ran and every copy into a device chunk is complete.
  void Run(const std::vector<int>& chunks, const AddUpdate& add, const RunUpdates& run);

  HostAccess AccessFor(int chunk) const;
  // Whether `chunk` can be held for an update ahead now: kInPlace and kBring need it
  // unpinned (Hold pins it; a pinned chunk is read by its pinner and cannot move), and
  // a chunk to bring must not be in use. kStaged always.
  bool CanHold(int chunk, HostAccess access) const;
  // Holds `chunk` for an update on another thread: kBring sends it to the host and
  // returns the copy's ticket (the updating thread waits on it; null when the copy
  // already finished); kInPlace and kBring pin it (not evicted, prefetched or moved).
  // kStaged touches nothing: the chunk stays free to move.
  std::shared_ptr<CopyTicket> Hold(int chunk, HostAccess access);
  // After the updates held for: unpins every held chunk; then ReturnHeld sends the
  // brought ones back to the device where they fit without evicting.
  void UnpinHeld();
  void ReturnHeld();

  // Copies the ranges of `staging` an update wrote (`written`, ascending) into compute
  // chunk `chunk`, one copy per run of adjacent ranges; a copy to the device adds its
  // ticket to `tickets`.
  void WriteStaged(int chunk, const at::Tensor& staging, const std::vector<ElementRange>& written, Tickets& tickets);
  void Wait(Tickets& tickets);  // waits for and clears them

  // For an update on the device: its compute chunk to the device (evicting as for an
  // access).
  void PlaceOnDevice(int chunk) { moves_.ToDevice(chunk); }

 private:
  // Two staging buffers, or none when the host tier cannot lend both.
  bool BorrowStaging(at::Tensor (&staging)[2]);
  void RunStaged(int chunk, const at::Tensor& staging, Tickets& copies, const AddUpdate& add, const RunUpdates& run);

  OptimizerMoves& moves_;
  HostPipelineSettings settings_;
  std::vector<int> pinned_;   // held and pinned, until UnpinHeld
  std::vector<int> brought_;  // held and brought to the host, until ReturnHeld
};

}  // namespace ps::chunkmem
