#include "base/staging_arena.h"

#include <ATen/ops/empty.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace ps::base {
namespace {

constexpr int64_t kAlignNumel = 16;  // 64 bytes of fp32

int64_t RoundUp(int64_t numel) { return (numel + kAlignNumel - 1) / kAlignNumel * kAlignNumel; }

}  // namespace

StagingArena::Lease::Lease(StagingArena* arena, int64_t offset_numel, int64_t span_numel, at::Tensor values)
    : arena_(arena), offset_numel_(offset_numel), span_numel_(span_numel), values_(std::move(values)) {}

StagingArena::Lease::Lease(Lease&& other) noexcept
    : arena_(std::exchange(other.arena_, nullptr)),
      offset_numel_(other.offset_numel_),
      span_numel_(other.span_numel_),
      values_(std::move(other.values_)) {}

StagingArena::Lease::~Lease() {
  values_ = at::Tensor();  // a buffer of its own is freed before its room is given back
  if (arena_ != nullptr) arena_->Give(offset_numel_, span_numel_);
}

StagingArena::StagingArena(int64_t capacity_numel) : capacity_numel_(RoundUp(capacity_numel)) {
  if (capacity_numel < 0) throw std::invalid_argument("StagingArena: negative capacity");
  if (capacity_numel_ > 0) free_.emplace(0, capacity_numel_);
}

StagingArena::Lease StagingArena::Take(int64_t numel) {
  if (numel < 0) throw std::invalid_argument("StagingArena: a piece of " + std::to_string(numel) + " values");
  const int64_t span = RoundUp(numel);
  if (span == 0) return Lease(nullptr, 0, 0, at::empty({0}, at::kFloat));
  std::unique_lock<std::mutex> lock(mutex_);
  if (span > capacity_numel_) {  // a buffer of its own, when nothing else is out
    ++own_buffers_waiting_;
    given_.wait(lock, [&] { return in_use_numel_ == 0; });
    --own_buffers_waiting_;
    in_use_numel_ = span;
    own_buffer_out_ = true;
    arena_ = at::Tensor();  // no piece is out: its memory is freed here, before the buffer is taken
    lock.unlock();
    try {
      return Lease(this, -1, span, at::empty({numel}, at::kFloat));
    } catch (...) {
      Give(-1, span);
      throw;
    }
  }
  // Served in arrival order: a request waits while an earlier one does (so a large one
  // is not overtaken, round after round, by smaller ones that fit beside the pieces out).
  const uint64_t ticket = next_ticket_++;
  struct Turn {  // the next request's turn once this one is served or gives up (throws)
    StagingArena& arena;
    ~Turn() {
      ++arena.serving_ticket_;
      arena.given_.notify_all();
    }
  };
  for (;;) {
    if (ticket == serving_ticket_ && !own_buffer_out_ && own_buffers_waiting_ == 0) {
      if (!arena_.defined()) {
        try {
          arena_ = at::empty({capacity_numel_}, at::kFloat);
        } catch (...) {
          Turn next{*this};
          throw;
        }
      }
      for (auto it = free_.begin(); it != free_.end(); ++it) {  // the first range that holds it
        if (it->second < span) continue;
        Turn next{*this};  // served, or thrown below: the next request's turn either way
        const int64_t offset = it->first, rest = it->second - span;
        at::Tensor view = arena_.narrow(0, offset, numel);  // before the books change (may throw)
        auto node = free_.extract(it);  // the rest reuses the node: no allocation, nothing to throw
        if (rest > 0) {
          node.key() = offset + span;
          node.mapped() = rest;
          free_.insert(std::move(node));
        }
        in_use_numel_ += span;
        return Lease(this, offset, span, std::move(view));
      }
    }
    ++arena_requests_waiting_;
    given_.wait(lock);
    --arena_requests_waiting_;
  }
}

void StagingArena::Give(int64_t offset_numel, int64_t span_numel) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    in_use_numel_ -= span_numel;
    if (offset_numel < 0) {  // the buffer of its own (already freed by the Lease)
      own_buffer_out_ = false;
    } else {
      Join(offset_numel, span_numel);
    }
  }
  given_.notify_all();
}

// Returns [offset, offset + span) to the free ranges, joined with its neighbours.
void StagingArena::Join(int64_t offset_numel, int64_t span_numel) {
  auto it = free_.emplace(offset_numel, span_numel).first;
  auto next = std::next(it);
  if (next != free_.end() && it->first + it->second == next->first) {  // joins the range after it
    it->second += next->second;
    free_.erase(next);
  }
  if (it != free_.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second == it->first) {  // joins the range before it
      prev->second += it->second;
      free_.erase(it);
    }
  }
}

int64_t StagingArena::in_use_numel() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return in_use_numel_;
}

int64_t StagingArena::held_numel() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return (arena_.defined() ? capacity_numel_ : 0) + (own_buffer_out_ ? in_use_numel_ : 0);
}

int StagingArena::arena_requests_waiting() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return arena_requests_waiting_;
}

int StagingArena::own_buffers_waiting() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return own_buffers_waiting_;
}

}  // namespace ps::base
