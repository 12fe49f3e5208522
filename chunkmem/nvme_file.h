// NvmeFile: the NVMe tier's one file (docs/chunkmem.md, "NVMe tier"): created in a
// directory with O_DIRECT, unlinked at once (working memory no later run can read),
// preallocated to its size, and read and written in 4 KiB-aligned ranges from and into
// 4 KiB-aligned host memory through an io_uring (Debian's liburing; a kernel without
// io_uring gets pread/pwrite on the same worker). A request is split into pieces that are
// in flight together; a worker thread submits and reaps them, so I/O goes on while the
// caller computes. Read/Write return a ticket; Wait blocks until that request finished
// and throws std::runtime_error naming the path, offset and error when it failed.
// Read, Write and Wait may be called from one thread at a time (the training thread).
// CheckNvmeDir holds the refusals a run makes before training (no torch dependency).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

#include "chunkmem/nvme_layout.h"  // kNvmeAlignBytes, NvmeAlignUp

namespace ps::chunkmem {


// Empty when `dir` can hold an NVMe tier of `bytes`; else why not, naming the path and
// the bytes: it does not exist or is not a directory, is a tmpfs or ramfs (host memory),
// is not writable, does not support O_DIRECT, or has less free space than `bytes`.
std::string CheckNvmeDir(const std::string& dir, int64_t bytes);

// What the completion of one piece of `piece_bytes` means, `result` being the bytes
// transferred or -errno, after `tries` earlier transient failures of the same piece:
// kDone; kAgain (the remainder from `done_bytes` on goes again: a short transfer that
// stays 4 KiB-aligned, or EAGAIN/EINTR, which some kernels return for O_DIRECT under
// pressure, at most kNvmeTransientRetries times in a row, the worker pausing longer each
// time); kFailed (`error` says why:
// an errno, no bytes, a short unaligned transfer, or transient failures past the bound).
constexpr int kNvmeTransientRetries = 16;
struct PieceOutcome {
  enum Kind { kDone, kAgain, kFailed } kind = kDone;
  int64_t done_bytes = 0;  // kAgain: the bytes transferred before the remainder
  bool transient = false;  // kAgain: an EAGAIN/EINTR (counts towards the bound)
  std::string error;       // kFailed
};
PieceOutcome ClassifyCompletion(int64_t result, int64_t piece_bytes, int tries);

struct NvmeFileStats {
  int64_t read_bytes = 0;     // completed, cumulative
  int64_t written_bytes = 0;
  int64_t requests = 0;
  int64_t transient_retries = 0;  // pieces sent again after an EAGAIN/EINTR
};

class NvmeFile {
 public:
  using Ticket = int64_t;

  // A file of `bytes` (rounded up to 4 KiB) in `dir`, created, unlinked and
  // preallocated; at most `pieces_in_flight` pieces of at most `piece_bytes` in flight.
  // Throws std::runtime_error naming the directory and the bytes when it cannot.
  // `use_uring` false: pread/pwrite on the worker (as where the kernel has no io_uring).
  NvmeFile(const std::string& dir, int64_t bytes, int pieces_in_flight = 32, int64_t piece_bytes = 1 << 20,
           bool use_uring = true);
  ~NvmeFile();  // waits for the requests in flight
  NvmeFile(const NvmeFile&) = delete;
  NvmeFile& operator=(const NvmeFile&) = delete;

  // Bytes [offset, offset + bytes) of the file from/into `buffer`; all three 4 KiB
  // multiples (aligned), within the file. The buffer stays valid until the ticket is waited.
  Ticket Read(int64_t offset, void* buffer, int64_t bytes);
  Ticket Write(int64_t offset, const void* buffer, int64_t bytes);
  // Until the request finished; throws if it failed. A ticket is waited once.
  void Wait(Ticket ticket);
  // Whether it finished (Wait then does not block).
  bool Done(Ticket ticket);

  int64_t size_bytes() const { return size_bytes_; }
  const std::string& dir() const { return dir_; }
  // "io_uring", or "pread/pwrite (io_uring unavailable: <reason>)".
  const std::string& backend() const { return backend_; }
  NvmeFileStats stats() const;

 private:
  struct Piece {
    Ticket ticket;
    bool write;
    int64_t offset;
    char* buffer;
    int64_t bytes;
    int tries = 0;  // transient failures in a row (ClassifyCompletion)
  };
  struct Request {
    int64_t pieces_left = 0;
    std::string error;  // the first failure
  };
  struct Uring;

  Ticket Submit(bool write, int64_t offset, void* buffer, int64_t bytes);
  void Work();                                   // the worker thread
  void SubmitAndWait();                          // io_uring: submit, then wait up to 1 ms
  void Finish(const Piece& piece, int64_t result);  // under mu_: a piece's completion
  void RunBlocking(const Piece& piece);          // the pread/pwrite backend

  std::string dir_;
  int fd_ = -1;
  int64_t size_bytes_ = 0;
  int pieces_in_flight_;
  int64_t piece_bytes_;
  std::string backend_;
  std::unique_ptr<Uring> uring_;  // null: pread/pwrite

  mutable std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::deque<Piece> queued_;
  int in_flight_ = 0;
  bool stop_ = false;
  // A transient failure's pause before the worker sends again: 50 us doubled per try in a
  // row, at most kMaxRetryPauseUs (16 tries wait ~0.2 s in all).
  static constexpr int64_t kMaxRetryPauseUs = 20000;
  int64_t retry_pause_us_ = 0;
  Ticket next_ticket_ = 1;
  std::unordered_map<Ticket, Request> requests_;
  NvmeFileStats stats_;
  std::thread worker_;
};

}  // namespace ps::chunkmem
