// Small agreements between ranks: one integer reduced over all ranks, or one string from
// every rank. For decisions every rank must take the same way (save now? did every rank
// write its share?) and for exchanging short texts (a checkpoint shard's file list).
// Collective: every rank calls with the same arguments but its own value, in the same
// order as its other collectives. `device`: where the communicator takes tensors (CPU
// for Gloo, the rank's GPU for NCCL). Training thread only.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace ps::comm {

// `value` reduced over all ranks (kSum, kMax; kAvg is refused: integers).
int64_t AllReduceInt(Communicator& comm, int64_t value, ReduceOp op, at::Device device);

// Every rank's `text`, indexed by rank (two collectives: the lengths, then the bytes).
std::vector<std::string> AllGatherStrings(Communicator& comm, const std::string& text, at::Device device);

}  // namespace ps::comm
