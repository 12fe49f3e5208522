// NvmeState: a run's NVMe tier (docs/chunkmem.md, "NVMe tier"): the file (NvmeFile),
// the ring (NvmeRing) over slots borrowed once from the store's host tier, and the
// mounting of a chunk's state payloads (store entries marked MarkNvme) onto its slot
// while the ring holds the chunk for a caller: between Acquire and Release,
// store.payload(id) of its master, m and v are views of the slot; otherwise they have no
// payload. A chunk's parts lie in its extent as chunkmem/nvme_layout.h says.
// Training thread only.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "chunkmem/chunk_store.h"
#include "chunkmem/nvme_file.h"
#include "chunkmem/nvme_layout.h"
#include "chunkmem/nvme_ring.h"

namespace ps::chunkmem {

// A chunk's state entries in the store: [NvmePart] -> store id; master -1 when the
// compute chunk is the master (fp32 compute); all -1: the chunk is not on the tier.
using NvmeChunkIds = std::array<int, 3>;

struct NvmeSettings {
  std::string dir;
  int ring_slots = 4;
  int pieces_in_flight = 32;
  int64_t piece_bytes = int64_t{1} << 20;
};

class NvmeState {
 public:
  // `chunks[c]`: chunk c's state entries (registered, without payload; marked MarkNvme
  // here). Creates the file (throws naming the directory and bytes when it cannot) and
  // borrows the ring from the host tier (throws when the budget cannot take it).
  NvmeState(ChunkStore& store, std::vector<NvmeChunkIds> chunks, const NvmeSettings& settings);
  ~NvmeState();  // waits for the writes in flight; gives the ring back
  NvmeState(const NvmeState&) = delete;
  NvmeState& operator=(const NvmeState&) = delete;

  bool on_nvme(int chunk) const { return extents_.at(chunk).bytes > 0; }
  // The step's host updates of tier chunks will come in `order`: reads start.
  void BeginStep(const std::vector<int>& order) { ring_->BeginStep(order); }
  // Mounts `chunk`'s state (read from the file; `read` false: the caller writes every
  // byte of every part) until Release; `written` writes the slot back to the file.
  void Acquire(int chunk, bool read = true);
  void Release(int chunk, bool written);  // throws no I/O error (NvmeRing::Release)
  // Unmounts an acquired chunk whose update failed half-way: its slot is dropped, not
  // written and not kept (the file keeps the chunk's last state).
  void Abandon(int chunk);
  void Poll(bool rethrow = true) { ring_->Poll(rethrow); }
  void Flush() { ring_->Flush(); }

  int64_t file_bytes() const { return file_->size_bytes(); }
  int64_t ring_bytes() const;
  int ring_slots() const { return static_cast<int>(slots_.size()); }  // NvmeRingSlots: at most one per chunk
  const std::string& backend() const { return file_->backend(); }
  NvmeRingStats ring_stats() const { return ring_->stats(); }
  NvmeFileStats file_stats() const { return file_->stats(); }

 private:
  void Unmount(int chunk);  // its entries' payloads dropped (a no-op for one not mounted)

  ChunkStore& store_;
  std::vector<NvmeChunkIds> ids_;
  std::vector<NvmeExtent> extents_;
  std::vector<NvmeParts> parts_;
  std::vector<at::Tensor> borrowed_;  // the slots' memory, from the host tier
  std::vector<at::Tensor> slots_;     // kByte views starting at a 4 KiB boundary
  std::unique_ptr<NvmeFile> file_;
  std::unique_ptr<NvmeRing> ring_;   // after file_: goes first
};

// Holds one chunk mounted for a scope (checkpoints, start-up, the exit): Acquire in the
// constructor, Release in the destructor (written if set_written was called), or Abandon
// when the scope ends by an exception (its bytes may be half-filled: never written).
class NvmeMount {
 public:
  NvmeMount(NvmeState& state, int chunk, bool read = true)
      : state_(state), chunk_(chunk), exceptions_(std::uncaught_exceptions()) {
    state_.Acquire(chunk, read);
  }
  ~NvmeMount() {
    try {
      if (std::uncaught_exceptions() > exceptions_) {
        state_.Abandon(chunk_);
      } else {
        state_.Release(chunk_, written_);
      }
    } catch (...) {  // a destructor does not throw; Release throws only on misuse
    }
  }
  NvmeMount(const NvmeMount&) = delete;
  NvmeMount& operator=(const NvmeMount&) = delete;
  void set_written() { written_ = true; }

 private:
  NvmeState& state_;
  int chunk_;
  int exceptions_;  // uncaught when mounted
  bool written_ = false;
};

}  // namespace ps::chunkmem
