#include "chunkmem/nvme_ring.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <stdexcept>
#include <string>
#include <utility>

namespace ps::chunkmem {

NvmeRing::NvmeRing(NvmeFile& file, std::vector<NvmeExtent> extents, std::vector<void*> slots)
    : file_(file), extents_(std::move(extents)), lost_(extents_.size()) {
  if (slots.size() < 2) throw std::invalid_argument("NvmeRing: needs at least 2 slots");
  for (void* buffer : slots) {
    if (reinterpret_cast<uintptr_t>(buffer) % kNvmeAlignBytes != 0) {
      throw std::invalid_argument("NvmeRing: slot buffers must be 4 KiB-aligned");
    }
    slots_.push_back(Slot{buffer});
  }
}

NvmeRing::~NvmeRing() {
  for (Slot& slot : slots_) {
    if (slot.state != State::kReading && slot.state != State::kWriting) continue;
    try {
      file_.Wait(slot.ticket);
    } catch (...) {  // a destructor does not throw: Flush reports errors
    }
  }
}

void NvmeRing::CheckOnTier(int chunk) const {
  if (extents_.at(chunk).bytes == 0) throw std::invalid_argument("NvmeRing: chunk " + std::to_string(chunk) + " is not on the tier");
}

void NvmeRing::CheckNotLost(int chunk) const {
  if (!lost_.at(chunk).empty()) {
    throw std::runtime_error("NVMe tier: the optimizer state of chunk " + std::to_string(chunk) +
                             " is lost (its write-back failed: " + lost_[chunk] + "); the file holds an older copy");
  }
}

void NvmeRing::BeginStep(const std::vector<int>& order) {
  for (int chunk : order) CheckOnTier(chunk);
  order_ = order;
  next_pos_ = 0;
  Reap();
  ThrowPending();
  for (int chunk : order) CheckNotLost(chunk);
  Refill();
}

int NvmeRing::SlotOf(int chunk) const {
  for (int i = 0; i < num_slots(); ++i) {
    if (slots_[i].chunk == chunk) return i;
  }
  return -1;
}

int NvmeRing::WindowPosition(int chunk) const {
  const size_t n = order_.size();
  const size_t width = std::min<size_t>(slots_.size() - 1, n);
  for (size_t k = 0; k < width; ++k) {
    if (order_[(next_pos_ + k) % n] == chunk) return static_cast<int>(k);
  }
  return -1;
}

void NvmeRing::WaitSlot(Slot& slot) {
  const auto t0 = std::chrono::steady_clock::now();
  const State was = slot.state;
  // The state moves on before a failure is thrown: the slot never waits twice.
  slot.state = was == State::kReading ? State::kReady : State::kFree;
  auto fail = [&](const char* what) {
    if (was == State::kWriting && slot.chunk >= 0) lost_[slot.chunk] = what;  // the file's bytes are stale
    slot.chunk = -1;  // its bytes are not the file's
    slot.state = State::kFree;
  };
  try {
    file_.Wait(slot.ticket);
  } catch (const std::exception& e) {
    fail(e.what());
    throw;
  } catch (...) {
    fail("an unknown error");
    throw;
  }
  stats_.wait_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

void NvmeRing::Reap() {
  for (Slot& slot : slots_) {
    if ((slot.state != State::kReading && slot.state != State::kWriting) || !file_.Done(slot.ticket)) continue;
    try {
      WaitSlot(slot);
    } catch (...) {  // kept for the next call that may throw (Release does not)
      if (!error_) error_ = std::current_exception();
    }
  }
}

void NvmeRing::ThrowPending() {
  if (!error_) return;
  std::exception_ptr e = error_;
  error_ = nullptr;
  std::rethrow_exception(e);
}

void NvmeRing::SubmitRead(int slot_index, int chunk) {
  for (int i = 0; i < num_slots(); ++i) {  // invariants: one slot per chunk, no read behind its own write
    if (i != slot_index && slots_[i].chunk == chunk) {
      throw std::logic_error("NvmeRing: chunk " + std::to_string(chunk) + " read into a second slot");
    }
  }
  CheckNotLost(chunk);
  Slot& slot = slots_[slot_index];
  const NvmeExtent& e = extents_.at(chunk);
  const NvmeFile::Ticket ticket = file_.Read(e.offset_bytes, slot.buffer, e.bytes);  // the slot unchanged if refused
  slot.chunk = chunk;
  slot.state = State::kReading;
  slot.ticket = ticket;
  stats_.read_bytes += e.bytes;
}

int NvmeRing::ReusableSlot(bool must) {
  auto idle = [&](const Slot& s) { return s.state == State::kFree || s.state == State::kReady; };
  for (int i = 0; i < num_slots(); ++i) {  // empty first, then a copy no one needs soon
    if (slots_[i].state == State::kFree && slots_[i].chunk < 0) return i;
  }
  for (int i = 0; i < num_slots(); ++i) {
    if (idle(slots_[i]) && WindowPosition(slots_[i].chunk) < 0) return i;
  }
  if (!must) return -1;
  for (State wanted : {State::kWriting, State::kReading}) {  // then the next write to finish, then a read ahead
    for (int i = 0; i < num_slots(); ++i) {
      if (slots_[i].state != wanted) continue;
      WaitSlot(slots_[i]);
      return i;
    }
  }
  int farthest = -1;  // every slot idle and in the window: the one needed last
  for (int i = 0; i < num_slots(); ++i) {
    if (idle(slots_[i]) && (farthest < 0 || WindowPosition(slots_[i].chunk) > WindowPosition(slots_[farthest].chunk))) {
      farthest = i;
    }
  }
  if (farthest >= 0) return farthest;
  throw std::logic_error("NvmeRing: every slot is in use (at most " + std::to_string(num_slots() - 1) +
                         " chunks may be acquired at once)");
}

void NvmeRing::Refill() {
  const size_t n = order_.size();
  const size_t width = std::min<size_t>(slots_.size() - 1, n);
  for (size_t k = 0; k < width; ++k) {
    const int chunk = order_[(next_pos_ + k) % n];
    if (SlotOf(chunk) >= 0 || !lost_[chunk].empty()) continue;  // in a slot (then clean), or never read again
    const int slot = ReusableSlot(/*must=*/false);
    if (slot < 0) return;
    SubmitRead(slot, chunk);
  }
}

void* NvmeRing::Acquire(int chunk, bool read) {
  CheckOnTier(chunk);
  Reap();
  ThrowPending();
  int slot = SlotOf(chunk);
  if (slot >= 0 && slots_[slot].state == State::kInUse) {
    throw std::logic_error("NvmeRing: chunk " + std::to_string(chunk) + " is acquired twice");
  }
  if (slot < 0) {
    int in_use = 0;
    for (const Slot& s : slots_) in_use += s.state == State::kInUse;
    if (in_use >= num_slots() - 1) {
      throw std::logic_error("NvmeRing: every slot is in use (at most " + std::to_string(num_slots() - 1) +
                             " chunks may be acquired at once)");
    }
    if (read) CheckNotLost(chunk);
    slot = ReusableSlot(/*must=*/true);
    if (read) {
      SubmitRead(slot, chunk);
    } else {
      slots_[slot].chunk = chunk;
      slots_[slot].state = State::kReady;  // the caller's bytes
    }
  } else if (slots_[slot].state == State::kFree || slots_[slot].state == State::kWriting) {
    ++stats_.clean_hits;  // a clean copy, or the bytes being written: the chunk's newest
  }
  Slot& s = slots_[slot];
  if (s.state == State::kReading || s.state == State::kWriting) WaitSlot(s);
  s.state = State::kInUse;
  s.unread = !read;
  if (!order_.empty() && next_pos_ < order_.size() && order_[next_pos_] == chunk) ++next_pos_;
  if (next_pos_ == order_.size()) next_pos_ = 0;  // past the step's last: the next step's window
  Refill();
  return s.buffer;
}

void NvmeRing::Release(int chunk, bool written) {
  const int slot = SlotOf(chunk);
  if (slot < 0 || slots_[slot].state != State::kInUse) {
    throw std::logic_error("NvmeRing: chunk " + std::to_string(chunk) + " released but not acquired");
  }
  Slot& s = slots_[slot];
  if (written) {
    const NvmeExtent& e = extents_.at(chunk);
    try {
      s.ticket = file_.Write(e.offset_bytes, s.buffer, e.bytes);
      s.state = State::kWriting;
      lost_[chunk].clear();  // the caller's bytes, whole, on their way to the file
      stats_.written_bytes += e.bytes;
    } catch (const std::exception& err) {  // not submitted: the slot's bytes are the only copy, not kept
      lost_[chunk] = err.what();
      s.state = State::kFree;
      s.chunk = -1;
      if (!error_) error_ = std::current_exception();
    }
  } else {
    s.state = State::kFree;
    if (s.unread) s.chunk = -1;  // not the file's bytes: no clean copy
  }
  s.unread = false;
  Reap();
  Refill();
}

void NvmeRing::Poll(bool rethrow) {
  Reap();
  if (rethrow) ThrowPending();
  Refill();
}

void NvmeRing::Flush() {
  for (Slot& slot : slots_) {
    if (slot.state != State::kReading && slot.state != State::kWriting) continue;
    try {
      WaitSlot(slot);
    } catch (...) {  // every slot is waited for before the first error is thrown
      if (!error_) error_ = std::current_exception();
    }
  }
  ThrowPending();
}

void NvmeRing::Abandon(int chunk) {
  const int slot = SlotOf(chunk);
  if (slot < 0 || slots_[slot].state != State::kInUse) return;
  slots_[slot].state = State::kFree;
  slots_[slot].chunk = -1;  // its bytes may be half-updated: never served as a clean copy
}

}  // namespace ps::chunkmem
