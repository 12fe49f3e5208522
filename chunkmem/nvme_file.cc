#include "chunkmem/nvme_file.h"

#include <fcntl.h>
#include <liburing.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

namespace ps::chunkmem {
namespace {

std::string Errno(int err) { return std::string(std::strerror(err)); }

bool Aligned(int64_t n) { return n % kNvmeAlignBytes == 0; }

// A fresh file name in `dir` (the process id and a counter: two tiers of one process,
// or two ranks sharing a directory, never collide).
std::string FreshName(const std::string& dir, const char* what) {
  static std::atomic<int> counter{0};
  return dir + "/.ps_train-" + what + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
}

// Opens a new file in `dir` with O_DIRECT; -1 and errno on failure.
int OpenDirect(const std::string& path) {
  return ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_DIRECT | O_CLOEXEC, 0600);
}

}  // namespace

std::string CheckNvmeDir(const std::string& dir, int64_t bytes) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return "directory '" + dir + "' cannot be used: " + Errno(errno);
  if (!S_ISDIR(st.st_mode)) return "'" + dir + "' is not a directory";
  struct statfs fs {};
  constexpr long kTmpfsMagic = 0x01021994, kRamfsMagic = 0x858458f6;
  if (::statfs(dir.c_str(), &fs) == 0 && (fs.f_type == kTmpfsMagic || fs.f_type == kRamfsMagic)) {
    return "'" + dir + "' is a tmpfs (host memory, not a disk): the NVMe tier needs a disk";
  }
  const std::string probe = FreshName(dir, "probe");
  const int fd = OpenDirect(probe);
  if (fd < 0) {
    const int err = errno;
    if (err == EINVAL) return "directory '" + dir + "' does not support O_DIRECT (a tmpfs or similar): the NVMe tier needs a disk";
    return "directory '" + dir + "' is not writable: " + Errno(err);
  }
  ::close(fd);
  ::unlink(probe.c_str());
  struct statvfs vfs {};
  if (::statvfs(dir.c_str(), &vfs) != 0) return "directory '" + dir + "': statvfs failed: " + Errno(errno);
  const int64_t free_bytes = static_cast<int64_t>(vfs.f_bavail) * static_cast<int64_t>(vfs.f_frsize);
  if (free_bytes < bytes) {
    return "directory '" + dir + "' has " + std::to_string(free_bytes) + " bytes free; the NVMe tier needs " +
           std::to_string(bytes) + " bytes";
  }
  return "";
}

struct NvmeFile::Uring {
  io_uring ring{};
  std::vector<Piece> slots;      // a piece in flight per slot (user_data: its index)
  std::vector<int> free_slots;
};

NvmeFile::NvmeFile(const std::string& dir, int64_t bytes, int pieces_in_flight, int64_t piece_bytes, bool use_uring)
    : dir_(dir),
      size_bytes_(NvmeAlignUp(std::max<int64_t>(bytes, 1))),
      pieces_in_flight_(std::max(pieces_in_flight, 1)),
      piece_bytes_(NvmeAlignUp(std::clamp<int64_t>(piece_bytes, 1, int64_t{1} << 30))) {  // io_uring lengths are 32-bit
  const std::string refusal = CheckNvmeDir(dir, size_bytes_);
  if (!refusal.empty()) throw std::runtime_error("NVMe tier: " + refusal);
  const std::string path = FreshName(dir, "nvme");
  fd_ = OpenDirect(path);
  if (fd_ < 0) throw std::runtime_error("NVMe tier: cannot create a file in '" + dir + "': " + Errno(errno));
  ::unlink(path.c_str());  // working memory: gone with the process, never read by a later run
  if (::fallocate(fd_, 0, 0, size_bytes_) != 0) {
    int err = errno;
    // A file system without fallocate (the free space was checked above) gets a sparse file.
    if (err == EOPNOTSUPP) err = ::ftruncate(fd_, size_bytes_) == 0 ? 0 : errno;
    if (err != 0) {
      ::close(fd_);
      throw std::runtime_error("NVMe tier: cannot reserve " + std::to_string(size_bytes_) + " bytes in '" + dir +
                               "': " + Errno(err));
    }
  }
  auto uring = std::make_unique<Uring>();
  const int init = use_uring ? io_uring_queue_init(static_cast<unsigned>(pieces_in_flight_), &uring->ring, 0) : -ENOSYS;
  if (init == 0) {
    uring->slots.resize(pieces_in_flight_);
    for (int i = pieces_in_flight_ - 1; i >= 0; --i) uring->free_slots.push_back(i);
    uring_ = std::move(uring);
    backend_ = "io_uring";
  } else {
    backend_ = "pread/pwrite (io_uring unavailable: " + Errno(-init) + ")";
  }
  worker_ = std::thread([this] { Work(); });
}

NvmeFile::~NvmeFile() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  worker_.join();
  if (uring_) io_uring_queue_exit(&uring_->ring);
  ::close(fd_);
}

NvmeFile::Ticket NvmeFile::Read(int64_t offset, void* buffer, int64_t bytes) {
  return Submit(false, offset, buffer, bytes);
}

NvmeFile::Ticket NvmeFile::Write(int64_t offset, const void* buffer, int64_t bytes) {
  return Submit(true, offset, const_cast<void*>(buffer), bytes);  // never written through
}

NvmeFile::Ticket NvmeFile::Submit(bool write, int64_t offset, void* buffer, int64_t bytes) {
  const auto address = reinterpret_cast<uintptr_t>(buffer);
  if (!Aligned(offset) || !Aligned(bytes) || address % kNvmeAlignBytes != 0 || bytes <= 0 || offset < 0 ||
      offset + bytes > size_bytes_) {
    throw std::invalid_argument("NvmeFile: a request must be 4 KiB-aligned (offset, length, buffer) and within the " +
                                std::to_string(size_bytes_) + "-byte file; got offset " + std::to_string(offset) +
                                ", " + std::to_string(bytes) + " bytes");
  }
  // All of the request's pieces are queued or none is (a refused request leaves no piece
  // behind to read or write a buffer its caller takes back).
  std::vector<Piece> pieces;
  pieces.reserve(static_cast<size_t>((bytes + piece_bytes_ - 1) / piece_bytes_));
  std::lock_guard<std::mutex> lock(mu_);
  const Ticket ticket = next_ticket_;
  for (int64_t at = 0; at < bytes; at += piece_bytes_) {
    pieces.push_back({ticket, write, offset + at, static_cast<char*>(buffer) + at, std::min(piece_bytes_, bytes - at)});
  }
  Request& request = requests_[ticket];
  try {
    queued_.insert(queued_.end(), pieces.begin(), pieces.end());  // at the end: all or nothing
  } catch (...) {
    requests_.erase(ticket);
    throw;
  }
  ++next_ticket_;
  request.pieces_left = static_cast<int64_t>(pieces.size());
  ++stats_.requests;
  work_cv_.notify_one();
  return ticket;
}

void NvmeFile::Wait(Ticket ticket) {
  std::unique_lock<std::mutex> lock(mu_);
  auto it = requests_.find(ticket);
  if (it == requests_.end()) throw std::invalid_argument("NvmeFile: unknown or already waited ticket");
  Request* request = &it->second;  // stays valid across a rehash (an iterator would not)
  done_cv_.wait(lock, [&] { return request->pieces_left == 0; });
  const std::string error = std::move(request->error);
  requests_.erase(ticket);
  if (!error.empty()) throw std::runtime_error(error);
}

bool NvmeFile::Done(Ticket ticket) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = requests_.find(ticket);
  return it == requests_.end() || it->second.pieces_left == 0;
}

NvmeFileStats NvmeFile::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

PieceOutcome ClassifyCompletion(int64_t result, int64_t piece_bytes, int tries) {
  PieceOutcome out;
  if (result == -EAGAIN || result == -EINTR) {
    if (tries < kNvmeTransientRetries) {
      out.kind = PieceOutcome::kAgain;
      out.transient = true;
      return out;
    }
    out.kind = PieceOutcome::kFailed;
    out.error = Errno(static_cast<int>(-result)) + " (" + std::to_string(tries + 1) + " times in a row)";
  } else if (result < 0) {
    out.kind = PieceOutcome::kFailed;
    out.error = Errno(static_cast<int>(-result));
  } else if (result == 0) {
    out.kind = PieceOutcome::kFailed;
    out.error = "no bytes transferred (end of file or device)";
  } else if (result < piece_bytes) {  // short: the rest goes again, if it stays aligned
    out.kind = Aligned(result) ? PieceOutcome::kAgain : PieceOutcome::kFailed;
    out.done_bytes = result;
    if (out.kind == PieceOutcome::kFailed) out.error = "a short transfer of " + std::to_string(result) + " bytes";
  }
  return out;
}

void NvmeFile::Finish(const Piece& piece, int64_t result) {
  Request& request = requests_.at(piece.ticket);
  const PieceOutcome outcome = ClassifyCompletion(result, piece.bytes, piece.tries);
  int64_t& moved = piece.write ? stats_.written_bytes : stats_.read_bytes;
  if (outcome.kind == PieceOutcome::kAgain) {  // the piece is not finished
    const int64_t d = outcome.done_bytes;
    queued_.push_front({piece.ticket, piece.write, piece.offset + d, piece.buffer + d, piece.bytes - d,
                        outcome.transient ? piece.tries + 1 : 0});
    moved += d;
    if (outcome.transient) {
      ++stats_.transient_retries;
      retry_pause_us_ = std::max(retry_pause_us_, std::min<int64_t>(kMaxRetryPauseUs, int64_t{50} << piece.tries));
    }
    return;
  }
  if (outcome.kind == PieceOutcome::kDone) {
    moved += piece.bytes;
  } else if (request.error.empty()) {
    request.error = std::string("NVMe tier: ") + (piece.write ? "writing " : "reading ") +
                    std::to_string(piece.bytes) + " bytes at offset " + std::to_string(piece.offset) +
                    " of the tier's file in '" + dir_ + "' failed: " + outcome.error;
  }
  if (--request.pieces_left == 0) done_cv_.notify_all();
}

void NvmeFile::RunBlocking(const Piece& piece) {
  int64_t done = 0;
  int64_t result = 0;
  while (done < piece.bytes) {
    const ssize_t n = piece.write ? ::pwrite(fd_, piece.buffer + done, piece.bytes - done, piece.offset + done)
                                  : ::pread(fd_, piece.buffer + done, piece.bytes - done, piece.offset + done);
    if (n < 0 && errno == EINTR) continue;  // interrupted by a signal before any transfer
    if (n <= 0) {
      if (done == 0) result = n < 0 ? -errno : 0;  // else a short transfer: the rest goes again
      break;
    }
    done += n;
    result = done;
  }
  std::lock_guard<std::mutex> lock(mu_);
  Finish(piece, result);
}

void NvmeFile::Work() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    work_cv_.wait(lock, [&] { return stop_ || !queued_.empty() || in_flight_ > 0; });
    if (stop_ && queued_.empty() && in_flight_ == 0) return;
    if (retry_pause_us_ > 0) {  // a transient failure: give the device a moment before sending again
      const int64_t pause_us = std::exchange(retry_pause_us_, 0);
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::microseconds(pause_us));
      lock.lock();
    }
    if (!uring_) {
      const Piece piece = queued_.front();
      queued_.pop_front();
      lock.unlock();
      RunBlocking(piece);  // takes the lock to finish
      lock.lock();
      continue;
    }
    // Queue what fits into the ring, then submit and reap without the lock.
    while (!queued_.empty() && !uring_->free_slots.empty()) {
      io_uring_sqe* sqe = io_uring_get_sqe(&uring_->ring);
      if (sqe == nullptr) break;
      const int slot = uring_->free_slots.back();
      uring_->free_slots.pop_back();
      Piece& piece = uring_->slots[slot] = queued_.front();
      queued_.pop_front();
      if (piece.write) {
        io_uring_prep_write(sqe, fd_, piece.buffer, static_cast<unsigned>(piece.bytes), piece.offset);
      } else {
        io_uring_prep_read(sqe, fd_, piece.buffer, static_cast<unsigned>(piece.bytes), piece.offset);
      }
      io_uring_sqe_set_data64(sqe, static_cast<uint64_t>(slot));
      ++in_flight_;
    }
    lock.unlock();
    SubmitAndWait();
    lock.lock();
    unsigned head = 0, seen = 0;
    io_uring_cqe* cqe = nullptr;
    io_uring_for_each_cqe(&uring_->ring, head, cqe) {
      ++seen;
      const uint64_t data = io_uring_cqe_get_data64(cqe);
      if (data >= static_cast<uint64_t>(pieces_in_flight_)) continue;  // liburing's own timeout entry
      const int slot = static_cast<int>(data);
      Finish(uring_->slots[slot], cqe->res);
      uring_->free_slots.push_back(slot);
      --in_flight_;
    }
    io_uring_cq_advance(&uring_->ring, seen);
  }
}

void NvmeFile::SubmitAndWait() {
  // The entries queued are submitted (a failed submit leaves them queued for the next
  // one), then up to 1 ms is spent waiting for a completion, so pieces queued meanwhile
  // are submitted soon. Transient errors are retried; the pieces in flight stay in flight
  // (their buffers are the disk's until their completions arrive). Any other error of
  // the ring itself is a bug: the process stops rather than let I/O land in freed memory.
  int rc = io_uring_submit(&uring_->ring);
  if (rc >= 0 || rc == -EAGAIN || rc == -EBUSY || rc == -EINTR) {
    __kernel_timespec timeout{0, 1000000};
    io_uring_cqe* cqe = nullptr;
    rc = io_uring_wait_cqe_timeout(&uring_->ring, &cqe, &timeout);
  }
  if (rc >= 0 || rc == -ETIME || rc == -EAGAIN || rc == -EBUSY || rc == -EINTR) return;
  std::fprintf(stderr, "NVMe tier: the io_uring of the tier's file in '%s' failed: %s\n", dir_.c_str(),
               Errno(-rc).c_str());
  std::abort();
}

}  // namespace ps::chunkmem
