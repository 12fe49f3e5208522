// Host fp32 staging shared by threads: one arena of a fixed size, handed out in pieces.
// For start-up work that writes values through a temporary host buffer (initial values
// of a CUDA master, of a bf16 slot), on many threads at once.
//
// Contract: the pieces in use never overlap and never add up to more than the arena
// (`capacity_numel`); requests for the arena are served in arrival order, each waiting
// until the ones before it are served and a free range of its size exists (a waiting
// request waits only on pieces in use, which their tasks give back, provided no caller
// takes a piece while holding one; with finitely many tasks none waits forever). The
// arena is allocated once and reused: its pages are reused, not faulted in per piece
// (again only after the arena was freed for a larger request). A request larger than the
// arena gets a buffer of its own, allocated when nothing else is in use; the arena's memory is
// freed for it first, and requests for the arena wait from the moment such a request
// arrives until its buffer is returned (it goes before them). So the host memory held is
// at most max(arena, largest request). Pieces start at 64-byte boundaries. Every piece
// must be returned (its Lease destroyed) before the arena is.
#pragma once

#include <ATen/core/Tensor.h>

#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>

namespace ps::base {

class StagingArena {
 public:
  // A piece of the arena; returned when destroyed.
  class Lease {
   public:
    Lease(Lease&& other) noexcept;
    Lease& operator=(Lease&&) = delete;
    Lease(const Lease&) = delete;
    ~Lease();
    // `numel` contiguous fp32 values (what Take asked for), uninitialised.
    const at::Tensor& values() const { return values_; }

   private:
    friend class StagingArena;
    Lease(StagingArena* arena, int64_t offset_numel, int64_t span_numel, at::Tensor values);
    StagingArena* arena_;
    int64_t offset_numel_, span_numel_;  // offset -1: a buffer of its own (larger than the arena)
    at::Tensor values_;
  };

  explicit StagingArena(int64_t capacity_numel);
  StagingArena(const StagingArena&) = delete;
  StagingArena& operator=(const StagingArena&) = delete;

  // `numel` fp32 values (numel >= 0), waiting for room (above).
  Lease Take(int64_t numel);

  int64_t capacity_numel() const { return capacity_numel_; }
  // Values in pieces in use now (for tests and checks).
  int64_t in_use_numel() const;
  // Values of host memory held now: the arena when allocated, and a buffer of its own when
  // out (for tests and checks).
  int64_t held_numel() const;
  // Requests larger than the arena waiting now (for tests).
  int own_buffers_waiting() const;
  // Requests for the arena waiting now (for tests).
  int arena_requests_waiting() const;

 private:
  void Give(int64_t offset_numel, int64_t span_numel);
  void Join(int64_t offset_numel, int64_t span_numel);  // with mutex_ held

  const int64_t capacity_numel_;
  at::Tensor arena_;  // allocated on the first Take, so an unused arena costs nothing
  mutable std::mutex mutex_;
  std::condition_variable given_;
  std::map<int64_t, int64_t> free_;  // offset -> length (in values) of each free range, coalesced
  int64_t in_use_numel_ = 0;  // pieces of the arena and the buffer of its own, if out
  bool own_buffer_out_ = false;
  int own_buffers_waiting_ = 0;  // requests larger than the arena, waiting: the arena's requests wait too
  uint64_t next_ticket_ = 0;     // the arena's requests in arrival order: the next one's number
  uint64_t serving_ticket_ = 0;  // the number of the request served next
  int arena_requests_waiting_ = 0;
};

}  // namespace ps::base
