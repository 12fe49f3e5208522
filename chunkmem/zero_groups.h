// ZeroGroups: ZeRO over chunk groups (docs/comm.md, "ZeRO over chunk groups").
// Gathers a group of chunks for the blocks that use it and reduces the group's
// gradients into the chunk this rank owns.
//
// Group g = chunks [g*p, (g+1)*p); rank r owns chunk g*p + r, which is slot r of the
// gathered buffer, exactly the slice AllGather and ReduceScatter address. A group is
// all-gathered into one device buffer when a block first uses it (after warm-up, while
// the block before computes) and released when a block that does not use it starts;
// gradients are added into a group-sized fp32 buffer and reduce-scattered (averaged)
// into the owned grad chunk once the group's gradients of the micro-batch are in. At
// most one reduction is in flight while backward goes on.
// Every rank runs the same model with the same hooks, so every decision here (gather,
// release, reduce) is the same on every rank and collectives are issued in the same
// order everywhere. Eviction is a rank's own (its owned chunks differ) and never issues
// a collective. Frozen chunks (LoRA's base) are gathered like any other and never
// reduced: a group of frozen chunks alone gets no gradient buffer, and in a group mixing
// both the frozen slots of the reduction are dropped. Single-threaded like the runtime.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <vector>

#include "chunkmem/chunk_store.h"
#include "chunkmem/grad_sink.h"
#include "chunkmem/layout.h"
#include "chunkmem/residency.h"
#include "comm/communicator.h"

namespace ps::chunkmem {

struct ZeroStats {
  int64_t group_gathers = 0;          // groups all-gathered (prefetched ones included)
  int64_t group_prefetches = 0;       // of those, gathered ahead while the block before computed
  int64_t group_reductions = 0;       // group gradient buffers reduce-scattered
  int64_t reductions_overlapped = 0;  // of those, left in flight while backward went on
  int64_t comm_bytes = 0;             // bytes this rank sent into collectives (gathers + reductions)
};

class ZeroGroups {
 public:
  struct Chunks {
    std::vector<int> compute_ids;  // [chunk] compute entry's store id (a payload only where owned)
    std::vector<int> grad_ids;     // [chunk] grad chunk's store id where owned (the compute one when
                                   // gradients reuse the compute slots), else -1
    at::ScalarType compute_dtype = at::kFloat;
    bool grads_in_compute_chunks = false;
  };
  // `shapes`: each parameter's (the runtime's table); `has_grad`: the runtime's
  // per-parameter flags of this step (with gradients in the compute slots, a parameter
  // without one keeps its values). `grads_final(chunk)` is
  // called when the owned chunk's reduction is in. Everything passed outlives this.
  ZeroGroups(comm::Communicator& comm, ChunkStore& store, Residency& residency, GradSink& grads,
             const ChunkLayout& layout, Chunks chunks, const std::vector<std::vector<int64_t>>& shapes,
             const std::vector<std::vector<int>>& used_by_blocks, const std::vector<bool>& has_grad,
             std::function<void(int chunk)> grads_final);

  bool owned(int chunk) const { return chunk % world_ == rank_; }
  int rank() const { return rank_; }
  int world_size() const { return world_; }
  // Before a parameter of `chunk` is used: its group gathered (an all-gather ahead:
  // waited for).
  void EnsureGathered(int chunk);
  // The gathered slot of a chunk this rank does not own (c10::Error when not gathered).
  const at::Tensor& RemotePayload(int chunk) const;
  // Groups no parameter uses now and `block` does not need (-1: none needed) released.
  void ReleaseIdle(int block);
  // After warm-up, with prefetch: the next moment's groups, gathered ahead.
  void PrefetchNext();
  // Parameter `index`'s gradient of this micro-batch into its group's buffer; the group
  // reduced once its gradients are all in.
  void AddGrad(int index, const at::Tensor& grad);
  // After AddGrad: the group of `chunk` reduced if its gradients of the micro-batch are in.
  void ReduceIfComplete(int chunk);
  // Backward is over: open group buffers reduced, the reduction in flight finished.
  void FinishBackward();
  const ZeroStats& stats() const { return stats_; }

 private:
  void Gather(int group, bool ahead = false);
  void WaitGather(int group);
  void ReleaseGroup(int group);
  bool GroupGradsIn(int group) const;
  void ReduceGroupGrads(int group);  // started; the one before it finished
  void FinishReduction();            // the reduction in flight (if any): waited for, added in
  void WriteReduced(int own, const at::Tensor& reduced);
  void MakeDeviceRoom(int64_t bytes, int keep, const char* what);

  comm::Communicator& comm_;
  ChunkStore& store_;
  Residency& residency_;
  GradSink& grads_;
  const ChunkLayout& layout_;
  Chunks chunks_;
  const std::vector<std::vector<int64_t>>& shapes_;  // [param] (the runtime's)
  const std::vector<bool>& has_grad_;              // [param] this step
  std::function<void(int)> grads_final_;
  int world_ = 1, rank_ = 0;
  std::vector<std::vector<int>> groups_of_block_;  // [block] groups its parameters are in
  std::vector<at::Tensor> gathered_;               // [group] device buffer while gathered
  std::vector<comm::WorkPtr> gather_work_;         // [group] its all-gather, while in flight
  std::vector<at::Tensor> remote_;                 // [chunk] not owned: its slot of the gathered buffer
  std::vector<at::Tensor> group_grad_;             // [group] fp32 gradient buffer of this micro-batch
  // The one reduce-scatter left in flight while backward goes on: its group (-1: none)
  // and its work; its buffer stays borrowed until FinishReduction.
  int reducing_group_ = -1;
  comm::WorkPtr reduce_work_;
  bool overlapped_since_reduce_ = false;  // a gradient arrived after it started: backward went on
  ZeroStats stats_;
};

}  // namespace ps::chunkmem
