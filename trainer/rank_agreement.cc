#include "trainer/rank_agreement.h"

#include <algorithm>
#include <set>

#include "comm/exchange.h"
#include "trainer/config/config_loader.h"
#include "trainer/io/run_folder.h"

namespace ps::trainer {
namespace {

// Per node: the same files may live at another path on another node, and nodes may
// have other core counts.
const std::vector<std::string> kPerNodeKeys = {"run.output_dir",  "checkpoint.dir", "checkpoint.resume",
                                               "data.train_path", "data.valid_path", "data.tokenizer",
                                               "model.init_from", "run.threads",    "chunk.nvme_dir"};

std::string RankList(const std::vector<int>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out;
}

}  // namespace

std::vector<std::string> ConfigDifferences(const std::vector<std::map<std::string, std::string>>& configs,
                                           const std::vector<std::string>& ignored) {
  std::set<std::string> keys;
  for (const auto& c : configs) {
    for (const auto& [key, value] : c) keys.insert(key);
  }
  std::vector<std::string> lines;
  for (const auto& key : keys) {
    if (std::find(ignored.begin(), ignored.end(), key) != ignored.end()) continue;
    std::map<std::string, std::vector<int>> ranks_of;  // value -> ranks
    for (size_t r = 0; r < configs.size(); ++r) {
      const auto it = configs[r].find(key);
      ranks_of[it == configs[r].end() ? "(absent)" : it->second].push_back(static_cast<int>(r));
    }
    if (ranks_of.size() < 2) continue;
    std::string line = "  " + key + ":";
    bool first = true;
    for (const auto& [value, ranks] : ranks_of) {
      line += (first ? " " : "; ") + value + " on " + RankList(ranks);
      first = false;
    }
    lines.push_back(line);
  }
  return lines;
}

void CheckRanksAgree(comm::Communicator& comm, const Config& config, at::Device device) {
  const std::vector<std::string> yamls = comm::AllGatherStrings(comm, ConfigToYaml(config), device);
  std::vector<std::map<std::string, std::string>> configs;
  for (const auto& yaml : yamls) configs.push_back(FlattenYaml(yaml));
  const std::vector<std::string> lines = ConfigDifferences(configs, kPerNodeKeys);
  if (lines.empty()) return;
  std::string message = "the ranks were started with different configs (rank " + std::to_string(comm.rank()) + " of " +
                        std::to_string(comm.world_size()) + " sees):";
  for (const auto& line : lines) message += "\n" + line;
  throw ConfigError(message + "\nstart every rank with the same config and --set values");
}

void CheckRanksResumeOneStep(comm::Communicator& comm, int64_t step, at::Device device) {
  const std::vector<std::string> steps =
      comm::AllGatherStrings(comm, step < 0 ? std::string("none") : "step " + std::to_string(step), device);
  std::vector<std::map<std::string, std::string>> resumed;
  for (const auto& s : steps) resumed.push_back({{"resumed checkpoint", s}});
  const std::vector<std::string> lines = ConfigDifferences(resumed, {});
  if (lines.empty()) return;
  throw ConfigError("the ranks found different checkpoints to resume (rank " + std::to_string(comm.rank()) + " of " +
                    std::to_string(comm.world_size()) + " sees):\n" + lines.front() +
                    "\nevery rank must see the same checkpoints (a checkpoint.dir on a folder every node reads, or "
                    "the same copies on each node's own)");
}

}  // namespace ps::trainer
