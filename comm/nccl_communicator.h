// The Communicator for CUDA tensors, on NCCL (compiled only with --config=cuda; a CPU
// build throws). Rank 0 makes the ncclUniqueId and hands it out through the c10d store;
// the communicator is created non-blocking and polled against
// DistributedConfig::init_timeout_s. Collectives run on the communicator's own stream
// after the caller's current stream; Work::Wait() polls the collective's event and
// ncclCommGetAsyncError against timeout_s (the watchdog), aborts the communicator on
// a timeout or error, then makes the caller's stream wait on the event. The device is
// local_rank % device count (Slurm's --gpus-per-task leaves one visible GPU per task).
#pragma once

#include <memory>

#include "comm/communicator.h"

namespace ps::comm {

std::unique_ptr<Communicator> MakeNcclCommunicator(const RankEnv& env, const DistributedConfig& config);

}  // namespace ps::comm
