#include "comm/comm_config.h"

namespace ps::comm {

const char* ToString(Launcher l) {
  switch (l) {
    case Launcher::kAuto: return "auto";
    case Launcher::kNone: return "none";
    case Launcher::kTorchrun: return "torchrun";
    case Launcher::kSlurm: return "slurm";
  }
  return "?";
}

}  // namespace ps::comm
