// DistributedConfig: how ranks find each other, owned by comm/.
// Plain data; trainer/ parses YAML into it. Resolved against the environment by
// ResolveRankEnv (rank_env.h); used by CreateCommunicator (communicator.h).
#pragma once

#include <cstdint>
#include <string>

namespace ps::comm {

enum class Launcher { kAuto, kNone, kTorchrun, kSlurm };

struct DistributedConfig {
  Launcher launcher = Launcher::kAuto;  // auto: torchrun env, else Slurm env, else single
  std::string master_addr;              // "" = from MASTER_ADDR / SLURM_JOB_NODELIST
  int64_t master_port = 0;              // 0 = from MASTER_PORT / SLURM_JOB_ID
  int64_t init_timeout_s = 600;         // rendezvous: every rank must reach the store by then
  int64_t timeout_s = 600;              // one collective: longer means a rank died or hangs
  // A one-process run still builds the communicator and takes the data-parallel path
  // (plain: gradient all-reduce; chunks: ZeRO groups of one chunk), so that NCCL and
  // the ZeRO code run end to end on one GPU. Losses equal the plain run.
  bool force_collectives = false;
};

const char* ToString(Launcher l);

}  // namespace ps::comm
