// Communicator: the collectives a data-parallel run needs, over all ranks of one run,
// with two back ends behind one interface: Gloo for CPU tensors (gloo_communicator.h)
// and NCCL for CUDA tensors (nccl_communicator.h, --config=cuda). The trainer owns the
// one instance and passes references down (no globals).
//
// Every call is asynchronous and returns a Work; calls run in issue order, and every
// rank must issue the same calls in the same order. Tensors must be contiguous, and the
// caller keeps them alive and untouched until Wait() returns. Gloo runs the calls on
// one worker thread; NCCL on the communicator's own CUDA stream, ordered after the
// caller's current stream. A failure (a rank that died, stopped answering for
// DistributedConfig::timeout_s, a bad argument) is thrown by Wait() as c10::Error
// naming this rank, the operation and, when it can tell, the peer rank.
// Single caller thread (the training thread).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/DeviceType.h>

#include <memory>
#include <string>

#include "comm/comm_config.h"
#include "comm/rank_env.h"

namespace ps::comm {

enum class ReduceOp { kSum, kAvg, kMax };
const char* ToString(ReduceOp op);

class Work {
 public:
  virtual ~Work() = default;
  // Gloo: blocks until done. NCCL: blocks until done or failed (watchdog), then orders
  // the caller's current stream after it. Rethrows a failure; idempotent.
  virtual void Wait() = 0;
};
using WorkPtr = std::shared_ptr<Work>;

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual const char* backend() const = 0;  // "gloo" | "nccl"

  // In place over all ranks. kAvg divides the sum by the world size (floating types).
  virtual WorkPtr AllReduce(at::Tensor tensor, ReduceOp op) = 0;
  // Rank `root`'s `tensor` to every rank, in place.
  virtual WorkPtr Broadcast(at::Tensor tensor, int root) = 0;
  // out [world * n] <- every rank's in [n], rank r's at [r*n, (r+1)*n).
  virtual WorkPtr AllGather(at::Tensor out, at::Tensor in) = 0;
  // out [n] <- reduction over ranks of their in[rank*n, (rank+1)*n); in is [world * n]. out
  // may be this rank's slice of in itself (in place, as NCCL allows).
  virtual WorkPtr ReduceScatter(at::Tensor out, at::Tensor in, ReduceOp op) = 0;
  virtual WorkPtr Barrier() = 0;
};

// The communicator for tensors on `device` (kCPU: Gloo; kCUDA: NCCL, CUDA build only):
// connects to the store (within config.init_timeout_s) and to every rank. Throws
// c10::Error naming the rank, host and port on failure. `env.world_size` may be 1.
std::unique_ptr<Communicator> CreateCommunicator(const RankEnv& env, const DistributedConfig& config,
                                                 c10::DeviceType device);

}  // namespace ps::comm
