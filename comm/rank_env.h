// RankEnv: where this process sits in a multi-process run (rank, world size, local rank)
// and where the rendezvous store listens, resolved from the config and the environment
// of torchrun (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), Slurm srun
// (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_JOB_NODELIST, SLURM_JOB_ID) or none
// (one process). Plain data; the environment is read through an EnvGetter so tests pass
// a map. Any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "comm/comm_config.h"

namespace ps::comm {

struct RankEnv {
  int rank = 0;                // global rank in [0, world_size)
  int world_size = 1;
  int local_rank = 0;          // rank on this node: picks the GPU (local_rank % device count)
  std::string master_addr;     // host of the rendezvous store (rank 0); "" when world_size == 1
  int64_t master_port = 0;
  Launcher source = Launcher::kNone;  // which environment the figures came from

  bool distributed() const { return world_size > 1; }
  // "rank 1/4 (local 1), launcher torchrun, store 10.0.0.1:29500"
  std::string Describe() const;
};

// Value of an environment variable, or nullopt when unset.
using EnvGetter = std::function<std::optional<std::string>(const std::string& name)>;
EnvGetter ProcessEnvGetter();

// Resolves the rank environment. `config.launcher`:
//   none      one process, the environment ignored;
//   torchrun  RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT required (LOCAL_RANK default 0);
//   slurm     SLURM_PROCID, SLURM_NTASKS required; master = MASTER_ADDR, else the first
//             host of SLURM_JOB_NODELIST (SLURM_NODELIST); port = MASTER_PORT, else
//             15000 + SLURM_JOB_ID % 20000 (two jobs on one node do not collide);
//   auto      torchrun when RANK and WORLD_SIZE are set (they win over Slurm's: `srun
//             torchrun` gives every worker the node's SLURM_PROCID), else Slurm when
//             SLURM_PROCID is set and SLURM_NTASKS > 1, else one process.
// config.master_addr / master_port, when set, win over the environment. Throws
// c10::Error naming the variable that is missing or malformed.
RankEnv ResolveRankEnv(const DistributedConfig& config, const EnvGetter& env);

// Expands a Slurm hostlist: "node[01-03,07],gpu5" -> node01 node02 node03 node07 gpu5.
// Handles zero padding, several bracket groups per name ("r[1-2]n[1-2]"), names with
// dashes or without digits. Throws c10::Error on unbalanced brackets or bad ranges.
std::vector<std::string> ExpandHostlist(const std::string& hostlist);

}  // namespace ps::comm
