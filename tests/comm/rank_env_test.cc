#include "comm/rank_env.h"

#include <c10/util/Exception.h>

#include <map>

#include "tests/catch.h"

using ps::comm::DistributedConfig;
using ps::comm::ExpandHostlist;
using ps::comm::Launcher;
using ps::comm::ResolveRankEnv;
using Hosts = std::vector<std::string>;

namespace {

ps::comm::EnvGetter MapEnv(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

std::string ErrorOf(const DistributedConfig& c, std::map<std::string, std::string> vars) {
  try {
    ResolveRankEnv(c, MapEnv(std::move(vars)));
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  }
  return "";
}

}  // namespace

TEST_CASE("Slurm hostlists expand like scontrol show hostnames") {
  CHECK(ExpandHostlist("node[01-03,07],gpu5") == Hosts{"node01", "node02", "node03", "node07", "gpu5"});
  CHECK(ExpandHostlist("alpha,beta") == Hosts{"alpha", "beta"});                 // no digits (Lightning #5160)
  CHECK(ExpandHostlist("linux[1,2]") == Hosts{"linux1", "linux2"});              // comma in brackets (#14896)
  CHECK(ExpandHostlist("my-node-[8-10]") == Hosts{"my-node-8", "my-node-9", "my-node-10"});  // dashes (#1943)
  CHECK(ExpandHostlist("n[001-002]") == Hosts{"n001", "n002"});                  // zero padding
  CHECK(ExpandHostlist("nodeA,nodeB[001,003]") == Hosts{"nodeA", "nodeB001", "nodeB003"});  // mixed
  CHECK(ExpandHostlist("r[1-2]n[1-2]") == Hosts{"r1n1", "r1n2", "r2n1", "r2n2"});  // two groups
  CHECK(ExpandHostlist("single") == Hosts{"single"});
  CHECK(ExpandHostlist("gpu[09-11].cluster") == Hosts{"gpu09.cluster", "gpu10.cluster", "gpu11.cluster"});
  CHECK_THROWS_WITH(ExpandHostlist("node[1-3"), Catch::Contains("unbalanced"));
  CHECK_THROWS_WITH(ExpandHostlist("node[3-1]"), Catch::Contains("bad range '3-1'"));
  CHECK_THROWS_WITH(ExpandHostlist("node[a-b]"), Catch::Contains("bad range"));
}

TEST_CASE("torchrun variables give rank, world size and the store") {
  DistributedConfig c;
  auto r = ResolveRankEnv(c, MapEnv({{"RANK", "3"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"},
                                     {"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "29500"},
                                     {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}}));  // srun torchrun: torchrun wins
  CHECK(r.source == Launcher::kTorchrun);
  CHECK(r.rank == 3);
  CHECK(r.world_size == 8);
  CHECK(r.local_rank == 1);
  CHECK(r.master_addr == "10.0.0.1");
  CHECK(r.master_port == 29500);
  CHECK(r.Describe() == "rank 3/8 (local 1), launcher torchrun, store 10.0.0.1:29500");
  c.master_addr = "head";
  c.master_port = 1234;  // the config wins
  r = ResolveRankEnv(c, MapEnv({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "x"}, {"MASTER_PORT", "1"}}));
  CHECK(r.master_addr == "head");
  CHECK(r.master_port == 1234);
}

TEST_CASE("Slurm variables give rank, world size and the first node as master") {
  DistributedConfig c;
  auto r = ResolveRankEnv(c, MapEnv({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "16"}, {"SLURM_LOCALID", "5"},
                                     {"SLURM_JOB_NODELIST", "gpu[07-08]"}, {"SLURM_JOB_ID", "123456"}}));
  CHECK(r.source == Launcher::kSlurm);
  CHECK(r.rank == 5);
  CHECK(r.world_size == 16);
  CHECK(r.local_rank == 5);
  CHECK(r.master_addr == "gpu07");
  CHECK(r.master_port == 15000 + 123456 % 20000);
  r = ResolveRankEnv(c, MapEnv({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_NODELIST", "a,b"},
                                {"MASTER_ADDR", "b"}, {"MASTER_PORT", "4000"}}));
  CHECK(r.master_addr == "b");
  CHECK(r.master_port == 4000);
}

TEST_CASE("auto falls back to one process; none ignores the environment") {
  DistributedConfig c;
  CHECK(ResolveRankEnv(c, MapEnv({})).world_size == 1);
  CHECK(ResolveRankEnv(c, MapEnv({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}})).source == Launcher::kNone);
  c.launcher = Launcher::kNone;
  auto r = ResolveRankEnv(c, MapEnv({{"RANK", "1"}, {"WORLD_SIZE", "2"}}));
  CHECK(r.world_size == 1);
  CHECK(r.rank == 0);
  CHECK_FALSE(r.distributed());
}

TEST_CASE("missing or bad variables are errors that name them") {
  DistributedConfig c;
  c.launcher = Launcher::kTorchrun;
  CHECK(ErrorOf(c, {{"WORLD_SIZE", "2"}}).find("RANK is not set") != std::string::npos);
  CHECK(ErrorOf(c, {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "1"}}).find("MASTER_ADDR is not set") !=
        std::string::npos);
  CHECK(ErrorOf(c, {{"RANK", "x"}, {"WORLD_SIZE", "2"}}).find("RANK='x' is not an integer") != std::string::npos);
  CHECK(ErrorOf(c, {{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}})
            .find("rank 2 is not in [0, world size 2)") != std::string::npos);
  c.launcher = Launcher::kSlurm;
  CHECK(ErrorOf(c, {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}}).find("SLURM_JOB_NODELIST") != std::string::npos);
  CHECK(ErrorOf(c, {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_NODELIST", "a"}})
            .find("SLURM_JOB_ID is not set") != std::string::npos);
}
