// OptimizerMoves: the moves of compute chunks, and the host buffers, that the
// optimizer's updates need, between backward and the next forward (and, for an update
// ahead of the step, during backward). HostPipeline is their one caller.
//
// One implementation, ResidencyMoves: the Residency makes every move of a compute
// chunk and its pins are the only marks of a chunk held for an update; the store lends
// the host buffers. The ChunkRuntime owns the one a run uses
// (ChunkRuntime::optimizer_moves()); tests build one over a Residency and store of
// their own. The interface lets a test record the calls. Training thread only.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "chunkmem/chunk_store.h"
#include "chunkmem/copy_engine.h"
#include "chunkmem/residency.h"

namespace ps::chunkmem {

class OptimizerMoves {
 public:
  virtual ~OptimizerMoves() = default;

  // Whether layout chunk `chunk`'s compute payload is on the device tier.
  virtual bool on_device(int chunk) const = 0;
  // Whether a parameter of `chunk` is in use (kCompute): then it cannot move.
  virtual bool in_use(int chunk) const = 0;
  // Whether `chunk` is pinned (held for an update, or the input of a ZeRO gather in
  // flight): then it cannot move, and only its pinner may write it.
  virtual bool pinned(int chunk) const = 0;
  // To the host, on the copy engine when there is one (the payload waits for it at
  // first use). No-op when it is there.
  virtual void ToHost(int chunk) = 0;
  // Like ToHost, but the copy's ticket is handed over: the caller waits on it (any
  // thread) before touching the host payload. Null when nothing is in flight.
  virtual std::shared_ptr<CopyTicket> SendToHost(int chunk) = 0;
  // To the device, evicting as for an access. No-op when it is there.
  virtual void ToDevice(int chunk) = 0;
  // To the device (on the copy engine) only if it fits the budget now without evicting;
  // whether it is on the device.
  virtual bool ReturnToDeviceIfRoom(int chunk) = 0;
  // Pinned: not evicted, prefetched or moved until unpinned (an update on another thread).
  virtual void Pin(int chunk) = 0;
  virtual void Unpin(int chunk) = 0;
  // A zero-filled host buffer counted in the host tier until GiveBackHost; undefined
  // when the host tier cannot take it now.
  virtual at::Tensor TryBorrowHost(int64_t numel, at::ScalarType dtype) = 0;
  virtual void GiveBackHost(at::Tensor& buffer) = 0;
  // `values` (host, compute dtype) into elements [offset, offset + numel) of compute
  // chunk `chunk` (not in use, not pinned): on the device on the copy engine (the
  // ticket; wait before the chunk is used or `values` written again), else at once (null).
  virtual std::shared_ptr<CopyTicket> WriteCompute(int chunk, int64_t offset_numel, const at::Tensor& values) = 0;
  virtual void Wait(CopyTicket& ticket) = 0;
};

// The moves asked of a Residency and its store. `compute_ids[c]`: layout chunk c's
// compute entry in the store (as the residency's). Store and residency outlive this.
class ResidencyMoves : public OptimizerMoves {
 public:
  ResidencyMoves(ChunkStore& store, Residency& residency, std::vector<int> compute_ids)
      : store_(store), residency_(residency), compute_ids_(std::move(compute_ids)) {}

  bool on_device(int chunk) const override { return residency_.on_device(chunk); }
  bool in_use(int chunk) const override { return residency_.in_use(chunk) > 0; }
  bool pinned(int chunk) const override { return residency_.pinned(chunk); }
  void ToHost(int chunk) override { residency_.Place(chunk, Tier::kHost, /*async=*/true); }
  std::shared_ptr<CopyTicket> SendToHost(int chunk) override;
  void ToDevice(int chunk) override { residency_.Place(chunk, Tier::kDevice); }
  bool ReturnToDeviceIfRoom(int chunk) override { return residency_.ReturnToDeviceIfRoom(chunk, /*async=*/true); }
  void Pin(int chunk) override { residency_.Pin(chunk); }
  void Unpin(int chunk) override { residency_.Unpin(chunk); }
  at::Tensor TryBorrowHost(int64_t numel, at::ScalarType dtype) override;
  void GiveBackHost(at::Tensor& buffer) override { store_.GiveBack(Tier::kHost, buffer); }
  std::shared_ptr<CopyTicket> WriteCompute(int chunk, int64_t offset_numel, const at::Tensor& values) override;
  void Wait(CopyTicket& ticket) override { store_.Wait(ticket); }

 private:
  ChunkStore& store_;
  Residency& residency_;
  std::vector<int> compute_ids_;
};

}  // namespace ps::chunkmem
