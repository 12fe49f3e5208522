#include "comm/communicator.h"

#include <c10/util/Exception.h>
#include <csignal>

#include "comm/gloo_communicator.h"
#include "comm/nccl_communicator.h"

namespace ps::comm {

const char* ToString(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAvg: return "avg";
    case ReduceOp::kMax: return "max";
  }
  return "?";
}

std::unique_ptr<Communicator> CreateCommunicator(const RankEnv& env, const DistributedConfig& config,
                                                 c10::DeviceType device) {
  // A peer that dies closes its sockets; writing to one raises SIGPIPE, whose default
  // action kills this rank silently (exit 141) before Gloo or the store can report which
  // peer went away. Python ignores SIGPIPE at start-up, which is why torch.distributed never
  // shows this; a C++ binary must do it itself. Process-wide, and harmless: every write
  // in ps_train checks its result.
  if (env.world_size > 1) std::signal(SIGPIPE, SIG_IGN);
  if (device == c10::DeviceType::CUDA) return MakeNcclCommunicator(env, config);
  TORCH_CHECK(device == c10::DeviceType::CPU, "no communicator for device type ", c10::DeviceTypeName(device));
  return std::make_unique<GlooCommunicator>(env, config);
}

}  // namespace ps::comm
