// RuntimeMoves: OptimizerMoves asked of a ChunkRuntime, whose Residency makes the moves
// (its optimizer-facing methods: PlaceComputeChunk, ReturnToDeviceIfRoom,
// SendComputeChunkToHost, set_busy, the host buffers and WriteComputeChunk). Pins are
// the runtime's busy marks. The runtime outlives this. Training thread only.
#pragma once

#include "chunkmem/optimizer_moves.h"
#include "chunkmem/runtime.h"

namespace ps::chunkmem {

class RuntimeMoves : public OptimizerMoves {
 public:
  explicit RuntimeMoves(ChunkRuntime& runtime) : runtime_(runtime) {}

  bool on_device(int chunk) const override;
  bool in_use(int chunk) const override { return runtime_.ComputeCount(chunk) > 0; }
  void ToHost(int chunk) override { runtime_.PlaceComputeChunk(chunk, Tier::kHost, /*async=*/true); }
  std::shared_ptr<CopyTicket> SendToHost(int chunk) override { return runtime_.SendComputeChunkToHost(chunk); }
  void ToDevice(int chunk) override { runtime_.PlaceComputeChunk(chunk, Tier::kDevice); }
  bool ReturnToDeviceIfRoom(int chunk) override { return runtime_.ReturnToDeviceIfRoom(chunk, /*async=*/true); }
  void Pin(int chunk) override { runtime_.set_busy(chunk, true); }
  void Unpin(int chunk) override { runtime_.set_busy(chunk, false); }
  at::Tensor TryBorrowHost(int64_t numel, at::ScalarType dtype) override { return runtime_.TryBorrowHost(numel, dtype); }
  void GiveBackHost(at::Tensor& buffer) override { runtime_.GiveBackHost(buffer); }
  std::shared_ptr<CopyTicket> WriteCompute(int chunk, int64_t offset_numel, const at::Tensor& values) override {
    return runtime_.WriteComputeChunk(chunk, offset_numel, values);
  }
  void Wait(CopyTicket& ticket) override { runtime_.WaitCopy(ticket); }

 private:
  ChunkRuntime& runtime_;
};

}  // namespace ps::chunkmem
