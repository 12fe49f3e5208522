// The rendezvous store of a multi-process run: LibTorch's c10d::TCPStore, served by
// rank 0 at RankEnv::master_addr:master_port, a client on every rank. It carries the
// Gloo addresses and the NCCL unique id, and the ranks' heartbeats (liveness.h).
//
// Why c10d's store: the wheel ships complete headers for it (TCPStore.hpp needs only
// Store.hpp and c10), it is in libtorch_cpu.so that every binary links already, it has
// timeouts, and it is what torchrun's own rendezvous uses. Thread-safe.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>

#include "comm/rank_env.h"

namespace ps::comm {

// Connects (rank 0: listens, then waits for all ranks) within `timeout`. Throws
// c10::Error naming the rank, host and port when the store cannot be reached or bound.
c10::intrusive_ptr<c10d::Store> ConnectStore(const RankEnv& env, std::chrono::milliseconds timeout);

}  // namespace ps::comm
