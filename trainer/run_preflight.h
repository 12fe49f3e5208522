// CheckRunCanStart: the refusals of a chunk run's memory plan (PlanRefusal,
// trainer/engine/chunk_setup.h), taken before the run folder is claimed: a run refused
// for its budgets or its chunk.nvme_dir writes, moves and deletes nothing (also with
// run.overwrite, which would otherwise delete the earlier run first). With several ranks
// the NVMe directory must hold the tier files of every rank of this machine that shares
// it (the same host and the same directory by device and inode): their bytes are gathered.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "trainer/config/config.h"

namespace ps::trainer {

// Throws ConfigError with the plan's reason. `comm`: the ranks (null = one process);
// collective with several: every rank calls it once, after CheckRanksAgree.
void CheckRunCanStart(const Config& config, at::Device device, comm::Communicator* comm);

// "host:device:inode" of directory `dir`; empty when `dir` is empty or cannot be read.
std::string DirectoryIdentity(const std::string& dir);

// The tier bytes of the ranks whose directory is `identity`, from every rank's
// "<bytes> <identity>" entry; `ranks` is set to their count.
int64_t BytesSharingDirectory(const std::vector<std::string>& entries, const std::string& identity, int* ranks);

}  // namespace ps::trainer
