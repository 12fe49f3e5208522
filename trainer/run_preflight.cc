#include "trainer/run_preflight.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <vector>

#include "comm/exchange.h"
#include "trainer/config/config_loader.h"
#include "trainer/engine/chunk_setup.h"

namespace ps::trainer {

std::string DirectoryIdentity(const std::string& dir) {
  struct stat st {};
  if (dir.empty() || ::stat(dir.c_str(), &st) != 0) return "";
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  return std::string(host) + ":" + std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino);
}

int64_t BytesSharingDirectory(const std::vector<std::string>& entries, const std::string& identity, int* ranks) {
  int64_t bytes = 0;
  *ranks = 0;
  for (const std::string& entry : entries) {
    const size_t space = entry.find(' ');
    if (space == std::string::npos || entry.substr(space + 1) != identity) continue;
    bytes += std::stoll(entry.substr(0, space));
    ++*ranks;
  }
  return bytes;
}

void CheckRunCanStart(const Config& c, at::Device device, comm::Communicator* comm) {
  if (!c.chunk.enabled) return;
  const int world = comm != nullptr ? comm->world_size() : 1;
  const RunPlan plan = PlanRun(c, device, world, comm != nullptr ? comm->rank() : 0);
  const int64_t own = plan.plan.tiers.nvme_bytes;
  int64_t bytes = own;
  int sharing = 1;
  if (comm != nullptr && world > 1) {  // every rank takes part, with a directory or without
    const std::string id = DirectoryIdentity(c.chunk.nvme_dir);
    const std::vector<std::string> all = comm::AllGatherStrings(*comm, std::to_string(own) + " " + id, device);
    if (!id.empty()) bytes = BytesSharingDirectory(all, id, &sharing);
  }
  const std::string refusal = PlanRefusal(c, plan, bytes, sharing);
  // Every rank stops, also where only one node's directory is refused (else the others
  // would wait for it in their next collective).
  const bool any = comm != nullptr && world > 1
                       ? comm::AllReduceInt(*comm, refusal.empty() ? 0 : 1, comm::ReduceOp::kMax, device) != 0
                       : !refusal.empty();
  if (!refusal.empty()) throw ConfigError(refusal);
  if (any) throw ConfigError("another rank's chunk plan was refused before the run started (its error names why)");
}

}  // namespace ps::trainer
