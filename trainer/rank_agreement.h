// Ranks that disagree do not train: at start every rank's resolved config is gathered
// (comm/exchange.h) and compared key by key, before any collective whose size depends
// on the config (a rank with another model shape would otherwise make Gloo abort on a
// size mismatch inside its I/O thread, and a rank with another learning rate or seed
// would train to the end unnoticed). Keys that may differ from node to node (paths of
// local files, run.threads) are not compared. Collective: every rank calls it once, first.
// Then, since each rank finds its checkpoint itself (checkpoint.dir may be a node's own
// folder), the step each resumes is compared too.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "trainer/config/config.h"

namespace ps::trainer {

// Throws ConfigError on every rank when the ranks' resolved configs differ, naming each
// differing key and the ranks with each value.
void CheckRanksAgree(comm::Communicator& comm, const Config& config, at::Device device);

// Throws ConfigError on every rank when the ranks resume different steps (`step` -1:
// none), naming each rank's; ranks that went on would train apart, unnoticed.
// Collective: every rank calls it once, after finding its checkpoint.
void CheckRanksResumeOneStep(comm::Communicator& comm, int64_t step, at::Device device);

// The differences among `configs` (dotted key -> value text, one map per rank), as
// message lines "  optimizer.lr: 0.001 on ranks 0, 2; 0.01 on rank 1"; empty when all
// agree. Keys in `ignored` are not compared.
std::vector<std::string> ConfigDifferences(const std::vector<std::map<std::string, std::string>>& configs,
                                           const std::vector<std::string>& ignored);

}  // namespace ps::trainer
