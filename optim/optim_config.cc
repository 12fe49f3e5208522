#include "optim/optim_config.h"

namespace ps::optim {

const char* ToString(OptimizerType t) {
  switch (t) {
    case OptimizerType::kAdam: return "adam";
    case OptimizerType::kAdamW: return "adamw";
  }
  return "?";
}

const char* ToString(ScheduleType t) {
  switch (t) {
    case ScheduleType::kConstant: return "constant";
    case ScheduleType::kLinear: return "linear";
    case ScheduleType::kCosine: return "cosine";
    case ScheduleType::kWsd: return "wsd";
  }
  return "?";
}

const char* ToString(Dtype t) {
  switch (t) {
    case Dtype::kFp32: return "fp32";
    case Dtype::kFp16: return "fp16";
    case Dtype::kBf16: return "bf16";
  }
  return "?";
}

const char* ToString(StateDtype t) {
  switch (t) {
    case StateDtype::kFp32: return "fp32";
    case StateDtype::kBf16: return "bf16";
    case StateDtype::kInt8: return "int8";
  }
  return "?";
}

const char* ToString(MasterWeights t) { return t == MasterWeights::kNone ? "none" : "fp32"; }

}  // namespace ps::optim
