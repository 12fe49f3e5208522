#include "comm/rank_env.h"

#include <c10/util/Exception.h>

#include <cstdlib>

namespace ps::comm {
namespace {

int64_t ParseInt(const std::string& name, const std::string& value) {
  size_t used = 0;
  int64_t out = 0;
  try {
    out = std::stoll(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  TORCH_CHECK(used == value.size() && !value.empty(), "environment variable ", name, "='", value,
              "' is not an integer");
  return out;
}

std::optional<int64_t> IntVar(const EnvGetter& env, const std::string& name) {
  auto v = env(name);
  if (!v) return std::nullopt;
  return ParseInt(name, *v);
}

int64_t RequiredInt(const EnvGetter& env, const std::string& name, const char* launcher) {
  auto v = IntVar(env, name);
  TORCH_CHECK(v.has_value(), "distributed.launcher ", launcher, ": environment variable ", name, " is not set");
  return *v;
}

// Splits at commas outside brackets.
std::vector<std::string> SplitTopLevel(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  int depth = 0;
  for (char ch : s) {
    if (ch == '[') ++depth;
    if (ch == ']') --depth;
    TORCH_CHECK(depth >= 0 && depth <= 1, "hostlist '", s, "': unbalanced or nested brackets");
    if (ch == ',' && depth == 0) {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else {
      cur += ch;
    }
  }
  TORCH_CHECK(depth == 0, "hostlist '", s, "': unbalanced brackets");
  if (!cur.empty()) out.push_back(cur);
  return out;
}

// "01-03,07" -> 01 02 03 07 (the width of the first number of a range pads them all).
std::vector<std::string> ExpandRanges(const std::string& ranges, const std::string& whole) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= ranges.size()) {
    size_t comma = ranges.find(',', start);
    if (comma == std::string::npos) comma = ranges.size();
    const std::string part = ranges.substr(start, comma - start);
    const size_t dash = part.find('-');
    const std::string lo_text = part.substr(0, dash);
    const std::string hi_text = dash == std::string::npos ? lo_text : part.substr(dash + 1);
    auto digits = [](const std::string& t) { return !t.empty() && t.find_first_not_of("0123456789") == std::string::npos; };
    TORCH_CHECK(digits(lo_text) && digits(hi_text), "hostlist '", whole, "': bad range '", part, "'");
    const int64_t lo = std::stoll(lo_text), hi = std::stoll(hi_text);
    TORCH_CHECK(lo <= hi && hi - lo < 100000, "hostlist '", whole, "': bad range '", part, "'");
    for (int64_t i = lo; i <= hi; ++i) {
      std::string n = std::to_string(i);
      if (n.size() < lo_text.size()) n.insert(0, lo_text.size() - n.size(), '0');
      out.push_back(n);
    }
    start = comma + 1;
  }
  return out;
}

// One top-level entry, possibly with several bracket groups: cartesian product.
void ExpandEntry(const std::string& entry, const std::string& whole, std::vector<std::string>& out) {
  const size_t open = entry.find('[');
  if (open == std::string::npos) {
    out.push_back(entry);
    return;
  }
  const size_t close = entry.find(']', open);
  TORCH_CHECK(close != std::string::npos, "hostlist '", whole, "': unbalanced brackets");
  const std::string prefix = entry.substr(0, open), rest = entry.substr(close + 1);
  for (const auto& n : ExpandRanges(entry.substr(open + 1, close - open - 1), whole)) {
    ExpandEntry(prefix + n + rest, whole, out);
  }
}

}  // namespace

std::string RankEnv::Describe() const {
  std::string s = "rank " + std::to_string(rank) + "/" + std::to_string(world_size) + " (local " +
                  std::to_string(local_rank) + "), launcher " + ToString(source);
  if (distributed()) s += ", store " + master_addr + ":" + std::to_string(master_port);
  return s;
}

EnvGetter ProcessEnvGetter() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

std::vector<std::string> ExpandHostlist(const std::string& hostlist) {
  std::vector<std::string> out;
  for (const auto& entry : SplitTopLevel(hostlist)) ExpandEntry(entry, hostlist, out);
  return out;
}

RankEnv ResolveRankEnv(const DistributedConfig& config, const EnvGetter& env) {
  Launcher launcher = config.launcher;
  if (launcher == Launcher::kAuto) {
    if (env("RANK") && env("WORLD_SIZE")) {
      launcher = Launcher::kTorchrun;
    } else if (env("SLURM_PROCID") && IntVar(env, "SLURM_NTASKS").value_or(1) > 1) {
      launcher = Launcher::kSlurm;
    } else {
      launcher = Launcher::kNone;
    }
  }
  RankEnv r;
  r.source = launcher;
  switch (launcher) {
    case Launcher::kAuto:
    case Launcher::kNone:
      return r;
    case Launcher::kTorchrun: {
      r.rank = static_cast<int>(RequiredInt(env, "RANK", "torchrun"));
      r.world_size = static_cast<int>(RequiredInt(env, "WORLD_SIZE", "torchrun"));
      r.local_rank = static_cast<int>(IntVar(env, "LOCAL_RANK").value_or(0));
      r.master_addr = config.master_addr.empty() ? env("MASTER_ADDR").value_or("") : config.master_addr;
      TORCH_CHECK(!r.master_addr.empty() || r.world_size == 1,
                  "distributed.launcher torchrun: MASTER_ADDR is not set (nor distributed.master_addr)");
      r.master_port = config.master_port > 0 ? config.master_port : IntVar(env, "MASTER_PORT").value_or(0);
      TORCH_CHECK(r.master_port > 0 || r.world_size == 1,
                  "distributed.launcher torchrun: MASTER_PORT is not set (nor distributed.master_port)");
      break;
    }
    case Launcher::kSlurm: {
      r.rank = static_cast<int>(RequiredInt(env, "SLURM_PROCID", "slurm"));
      r.world_size = static_cast<int>(RequiredInt(env, "SLURM_NTASKS", "slurm"));
      r.local_rank = static_cast<int>(IntVar(env, "SLURM_LOCALID").value_or(0));
      r.master_addr = config.master_addr.empty() ? env("MASTER_ADDR").value_or("") : config.master_addr;
      if (r.master_addr.empty()) {
        auto list = env("SLURM_JOB_NODELIST");
        if (!list) list = env("SLURM_NODELIST");
        TORCH_CHECK(list.has_value(), "distributed.launcher slurm: neither MASTER_ADDR nor SLURM_JOB_NODELIST is set");
        const auto hosts = ExpandHostlist(*list);
        TORCH_CHECK(!hosts.empty(), "distributed.launcher slurm: SLURM_JOB_NODELIST '", *list, "' names no host");
        r.master_addr = hosts.front();
      }
      if (config.master_port > 0) {
        r.master_port = config.master_port;
      } else if (auto port = IntVar(env, "MASTER_PORT")) {
        r.master_port = *port;
      } else {
        r.master_port = 15000 + RequiredInt(env, "SLURM_JOB_ID", "slurm (no MASTER_PORT)") % 20000;
      }
      break;
    }
  }
  TORCH_CHECK(r.world_size >= 1, "launcher ", ToString(launcher), ": world size ", r.world_size, " must be >= 1");
  TORCH_CHECK(r.rank >= 0 && r.rank < r.world_size, "launcher ", ToString(launcher), ": rank ", r.rank,
              " is not in [0, world size ", r.world_size, ")");
  TORCH_CHECK(r.local_rank >= 0, "launcher ", ToString(launcher), ": local rank ", r.local_rank, " < 0");
  TORCH_CHECK(r.master_port < 65536, "rendezvous port ", r.master_port, " > 65535");
  return r;
}

}  // namespace ps::comm
