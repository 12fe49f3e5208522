// NvmeRing: the host buffers through which the NVMe tier's chunks are read and written
// (docs/chunkmem.md, "NVMe tier"): S slots, each one chunk's optimizer state at a time;
// in a step it reads ahead in the order the host Adam consumes the chunks and writes
// back behind. A slot is free (possibly holding a clean copy of a chunk: its bytes equal
// the file's), reading, ready, in use or writing:
//   free -> reading (read submitted) -> ready (read complete) -> in use (Acquire)
//   in use -> writing (Release, written) -> free with a clean copy (write complete)
//   in use -> free with a clean copy (Release, not written)
// Invariants: a chunk is in at most one slot; a chunk's read is never submitted while
// its write is in flight; a slot in use is never reused. Every call first reaps
// finished I/O and refills idle slots holding no chunk of the window (the next S - 1
// chunks of the order, from the next to be acquired; past the step's last chunk, the
// next step's first ones) with reads of the window's chunks.
// Acquire of a chunk outside the order (checkpoints, start-up, the exit) works too: it
// takes a free slot (or waits for one) and reads the chunk if no slot has it.
// A chunk whose write-back failed is lost: its bytes are in no slot and the file's are
// stale, so it is never read again (Acquire with `read`, BeginStep with it in the order
// and every later call that would read it throw, naming the failed write) until a
// caller fills it whole (Acquire without `read`) and releases it written.
// Training thread only. No torch dependency: bytes and offsets.
#pragma once

#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "chunkmem/nvme_file.h"

namespace ps::chunkmem {

// A chunk's optimizer state in the tier's file: bytes [offset, offset + bytes), both
// 4 KiB multiples; bytes 0: the chunk is not on the tier.
struct NvmeExtent {
  int64_t offset_bytes = 0;
  int64_t bytes = 0;
};

struct NvmeRingStats {
  int64_t read_bytes = 0;     // submitted, cumulative
  int64_t written_bytes = 0;
  int64_t clean_hits = 0;     // Acquires served by a clean copy, no read
  double wait_ms = 0;         // the caller blocked in Acquire or for a free slot, cumulative
};

class NvmeRing {
 public:
  // `slots`: S >= 2 buffers, 4 KiB-aligned, each at least the largest extent; they and
  // `file` outlive the ring.
  NvmeRing(NvmeFile& file, std::vector<NvmeExtent> extents, std::vector<void*> slots);
  ~NvmeRing();  // waits for every write (errors are not thrown from here: call Flush)
  NvmeRing(const NvmeRing&) = delete;
  NvmeRing& operator=(const NvmeRing&) = delete;

  // The order of the next step's chunks (each on the tier, once); reads start for free slots.
  void BeginStep(const std::vector<int>& order);
  // Chunk `chunk`'s bytes in a slot, for the caller until Release: waits for its read.
  // `read` false: a slot for the caller to fill (every byte; no read when no slot has
  // the chunk). At most S - 1 chunks in use at once.
  void* Acquire(int chunk, bool read = true);
  // Gives the slot back: `written` submits its write (the file gets the slot's bytes).
  // Does not throw I/O errors: an error it reaps (or a write it cannot submit) is thrown
  // by the next BeginStep, Acquire, Poll or Flush (so a scope guard may release). Not
  // written after an Acquire without `read`: the slot is not kept as a clean copy.
  void Release(int chunk, bool written);
  // Gives the slot of an acquired chunk back without writing it and without keeping it
  // as a clean copy (an update that failed half-way); no-op when not acquired.
  void Abandon(int chunk);
  // Reaps finished I/O and refills: reads that slots freed since the last call can take
  // (the caller's chance to keep the disk busy between steps: a reused slot is refilled
  // only in a call).
  // `rethrow` false: an I/O error reaped here waits for the next call that throws (a
  // caller on another thread, such as a recomputation inside backward).
  void Poll(bool rethrow = true);
  // Waits for every write submitted (and reads in flight); throws the first I/O error.
  void Flush();

  int num_slots() const { return static_cast<int>(slots_.size()); }
  const NvmeExtent& extent(int chunk) const { return extents_.at(chunk); }
  // The slot holding `chunk` (any state), or -1.
  int SlotOf(int chunk) const;
  NvmeRingStats stats() const { return stats_; }

 private:
  enum class State { kFree, kReading, kReady, kInUse, kWriting };
  struct Slot {
    void* buffer = nullptr;
    State state = State::kFree;
    int chunk = -1;  // free: the chunk of its clean copy, or -1
    NvmeFile::Ticket ticket = 0;
    bool unread = false;  // in use after an Acquire without `read`: the file's bytes are not in it
  };

  void Reap();          // finished reads -> ready, finished writes -> free (clean copies); keeps errors
  void ThrowPending();  // the first error Reap kept
  void CheckOnTier(int chunk) const;  // throws for a chunk with no extent
  void Refill();  // reusable slots read the window's chunks
  // Where `chunk` is among the next num_slots() - 1 chunks of the order (from the next
  // one to be acquired; past the end, the next step's first ones): 0 next, -1 not there.
  int WindowPosition(int chunk) const;
  // A slot for a read of `chunk`: free or ready and holding no chunk of the window; for
  // an Acquire (`must`), else the next write to finish, else a read ahead (the window's
  // farthest); -1 when there is none (not `must`). Never a slot in use.
  int ReusableSlot(bool must);
  void SubmitRead(int slot, int chunk);
  void WaitSlot(Slot& slot);  // its I/O complete (state moves on); throws its error
  void CheckNotLost(int chunk) const;  // throws for a chunk whose write-back failed

  NvmeFile& file_;
  std::vector<NvmeExtent> extents_;
  std::vector<Slot> slots_;
  std::vector<int> order_;
  size_t next_pos_ = 0;  // the position in order_ of the next chunk to be acquired
  std::exception_ptr error_;  // an I/O error reaped where it could not be thrown
  std::vector<std::string> lost_;  // [chunk] why its write-back failed; empty: not lost
  NvmeRingStats stats_;
};

}  // namespace ps::chunkmem
