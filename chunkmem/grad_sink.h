// GradSink: where each parameter's gradient goes when it arrives, and how the grad
// chunks reach the optimizer complete (docs/chunkmem.md, "Gradients"). Grad chunks,
// staging slots and landing buffers share the grad chunk's dtype: fp32, or bf16 in runs
// without an fp32 master (a micro-batch's gradients then add in bf16).
//
// By the grad chunk's home:
// - device (pinned after warm-up where the chunk's optimizer state updates there): the
//   gradient is added into it in place;
// - host: the gradient is added into the chunk's device staging slot; when every
//   parameter of the chunk that this micro-batch used has its gradient (block-major:
//   once backward is below every block using the chunk), the slot goes to the host in
//   one copy, straight into the grad chunk while it is zero this step, else into a
//   landing buffer added on completion. Copies run on the store's copy engine when it
//   has one; at most kMaxFlushesInFlight are in flight;
// - no device room for a slot, even after evicting: the gradient alone is copied and
//   added (counted in grad_host_fallbacks).
// Slots give way to compute chunks (GiveWay, the residency's hook): their partial sums
// go to the host and later gradients open a new slot.
// Not used when gradients reuse the compute slots; with ZeRO only for the arrival flags,
// dirty marks and grad-chunk zeroing (the group reductions write the grad chunks).
// Called on the thread that runs backward and the training thread, never concurrently.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "chunkmem/chunk_store.h"
#include "chunkmem/layout.h"
#include "chunkmem/residency.h"
#include "chunkmem/tensor_state.h"

namespace ps::chunkmem {

struct GradSinkStats {
  int64_t grad_flushes = 0;         // staging slots copied to a host grad chunk (one per chunk and micro-batch)
  int64_t grad_host_fallbacks = 0;  // gradients copied one by one (no device room for a staging slot)
  int grad_chunks_on_device = 0;    // grad chunks pinned on the device
};

class GradSink {
 public:
  static constexpr size_t kMaxFlushesInFlight = 2;

  struct Chunks {
    std::vector<int> grad_ids;    // [chunk] fp32 grad chunk's store id; -1: not held (ZeRO)
    std::vector<int> adam_m_ids;  // [chunk] Adam m's store id (where the optimizer updates); -1: not held
  };
  // `shapes`: each parameter's (the runtime's table); `states`: the runtime's parameter
  // states (read: which parameters this micro-batch used); `used_by_blocks`: each
  // parameter's blocks. `grads_final(chunk)` is called once a chunk's gradients of the
  // micro-batch are all on the host (the last flush of a complete chunk). Store,
  // residency, layout, shapes and states outlive the sink.
  GradSink(ChunkStore& store, Residency& residency, const ChunkLayout& layout, Chunks chunks,
           const std::vector<std::vector<int64_t>>& shapes, const std::vector<std::vector<int>>& used_by_blocks,
           const std::vector<TensorState>& states,
           bool block_major, std::function<void(int chunk)> grads_final);

  // Parameter `index`'s gradient of this micro-batch (block-major: one of several), in
  // the compute dtype or fp32, on the compute device.
  void Add(int index, const at::Tensor& grad);
  // After Add (not block-major): flushes the chunk's slot if its micro-batch is complete.
  void FlushIfComplete(int chunk);
  // Block-major: backward enters `block`; slots of chunks no block from it down uses go.
  void EnterBackwardBlock(int block);
  // Backward is over: every open slot flushed, every flush waited for, arrivals cleared.
  void FinishBackward();
  // Start of a step: grad chunks written since the last call zeroed; after warm-up,
  // grad chunks whose optimizer state is on the device pinned there as room allows.
  void BeginStep(bool warmed_up);
  // The residency's give-way: `evict()`, and where it cannot get there, slots give way
  // and it is tried again (block-major: finished flushes, then idle slots, then all).
  bool GiveWay(const std::function<bool()>& evict);

  // Arrival flags of this micro-batch (ZeRO's group reductions use them too).
  void MarkArrived(int index) { Init(); arrived_[index] = true; }
  void MarkDirty(int chunk) { Init(); dirty_[chunk] = true; }
  // Every parameter of `chunk` this micro-batch used (kCompute or kHoldAfterFwd) has
  // its flag in `flags` set.
  bool UsedParamsHave(int chunk, const std::vector<bool>& flags) const;
  bool MicroBatchIn(int chunk) const { return UsedParamsHave(chunk, arrived_); }
  bool started() const { return !arrived_.empty(); }
  int64_t GradChunkBytes(int chunk) const { return store_.chunk_bytes(chunks_.grad_ids[chunk]); }
  const GradSinkStats& stats() const { return stats_; }

 private:
  struct Flush {                         // a staging slot's copy to the host, in flight
    int chunk = 0;
    at::Tensor slot;                     // device staging slot (borrowed from the store)
    at::Tensor landing;                  // host landing buffer added on completion; undefined:
                                         // the copy went straight into the (zero) grad chunk
    std::shared_ptr<CopyTicket> ticket;  // null: the copy was synchronous
  };
  void Init();                           // sizes the per-chunk state (first use)
  at::Tensor GradView(int index) const;  // parameter `index`'s slot of its grad chunk
  bool ChunkComplete(int chunk) const;
  bool OpenSlot(int chunk);              // false: no device room even after evicting
  void FlushSlot(int chunk);
  void CompleteOldest();
  void CompleteFlushes(int chunk);       // all in flight up to the last one of `chunk` (-1: all)
  bool ReleaseSlots(bool idle_only = false);
  void PinToDevice();                    // BeginStep after warm-up

  ChunkStore& store_;
  Residency& residency_;
  const ChunkLayout& layout_;
  Chunks chunks_;
  const std::vector<TensorState>& states_;
  bool block_major_;
  std::function<void(int)> grads_final_;
  const std::vector<std::vector<int64_t>>& shapes_;  // [param]
  std::vector<std::vector<int>> blocks_of_chunk_;  // [chunk] blocks using it, ascending
  int num_blocks_ = 0;
  std::vector<bool> arrived_;            // [param] gradient in during this backward
  std::vector<at::Tensor> slot_;         // [chunk] open device staging slot
  std::vector<bool> dirty_;              // [chunk] grad chunk written since BeginStep
  std::vector<bool> host_written_;       // [chunk] host grad chunk written this step
  int backward_block_ = -1;              // block-major: lowest block reached (INT_MAX before, -1 after)
  std::deque<Flush> flushes_;            // in flight, oldest first
  GradSinkStats stats_;
};

}  // namespace ps::chunkmem
