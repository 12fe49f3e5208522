// LaunchLocalRanks: `ps_train --nproc N` starts N ranks of one run on this machine, for
// users without torchrun: N copies of its own binary (/proc/self/exe), each with the
// torchrun variables set (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR =
// 127.0.0.1, MASTER_PORT = a free port). One rank per GPU on CUDA, or N CPU processes.
//
// The group lives and dies together: SIGINT/SIGTERM/SIGUSR1 to the launcher are
// forwarded to every rank (which checkpoint and stop as one, exit 42); when a rank
// fails, the others get SIGTERM, then SIGKILL after a grace period; ranks get SIGKILL
// if the launcher itself dies (PR_SET_PDEATHSIG). Called from main only (it installs
// signal handlers for the launcher process).
#pragma once

#include <string>
#include <vector>

namespace ps::trainer {

// Runs `args` (argv without the program name and without --nproc) as `nproc` ranks and
// waits for all. Returns 0 when every rank exits 0, else the first failure's exit
// status (128 + signal for a rank killed by a signal).
int LaunchLocalRanks(int nproc, const std::vector<std::string>& args);

}  // namespace ps::trainer
