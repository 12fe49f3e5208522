#include "comm/communicator.h"

#include <c10/util/Exception.h>

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
  if (device == c10::DeviceType::CUDA) return MakeNcclCommunicator(env, config);
  TORCH_CHECK(device == c10::DeviceType::CPU, "no communicator for device type ", c10::DeviceTypeName(device));
  return std::make_unique<GlooCommunicator>(env, config);
}

}  // namespace ps::comm
