// GlooCommunicator: the Communicator for CPU tensors, on Debian's Gloo (libgloo-dev,
// TCP transport), rendezvous through the c10d store (store.h). Calls run in issue order
// on one worker thread; each has DistributedConfig::timeout_s, and a failure names the
// rank that stopped answering (liveness.h). World size 1 needs no Gloo at all.
//
// Why Debian's Gloo and not LibTorch's c10d::ProcessGroupGloo: the wheel ships
// ProcessGroupGloo.hpp but not the <gloo/...> headers it includes, and the Gloo inside
// libtorch_cpu.so is a newer revision than any headers we could pair it with. Both
// export the same gloo:: symbols (about 300 overlap), so libgloo.so must come first in
// the lookup order: the system_libs :gloo target arranges that, and the constructor
// checks it (a mismatch would be silent memory corruption).
#pragma once

#include <memory>
#include <string>

#include "comm/communicator.h"

namespace ps::comm {

// Defined in gloo_communicator.cc: the Gloo context, the worker thread, the heartbeat.
struct GlooState;

class GlooCommunicator final : public Communicator {
 public:
  // Connects to the store and to every rank within config.init_timeout_s.
  GlooCommunicator(const RankEnv& env, const DistributedConfig& config);
  ~GlooCommunicator() override;  // finishes queued calls, then disconnects

  int rank() const override { return env_.rank; }
  int world_size() const override { return env_.world_size; }
  const char* backend() const override { return "gloo"; }

  WorkPtr AllReduce(at::Tensor tensor, ReduceOp op) override;
  WorkPtr Broadcast(at::Tensor tensor, int root) override;
  WorkPtr AllGather(at::Tensor out, at::Tensor in) override;
  WorkPtr ReduceScatter(at::Tensor out, at::Tensor in, ReduceOp op) override;
  WorkPtr Barrier() override;

 private:
  RankEnv env_;
  std::unique_ptr<GlooState> state_;
};

}  // namespace ps::comm
