// ps_train: command-line entry point. Parses flags, loads the config, trains.
// The only place that decides how the process ends: user errors print one line
// "ps_train: error: ..." and exit 2; runtime failures exit 1; a run stopped by
// SIGTERM/SIGINT/SIGUSR1 exits 42 after writing a checkpoint (stop_signals.h).
// Multi-process runs: `--nproc N` starts N local ranks (launcher.h); a rank started by
// torchrun, Slurm or --nproc finds its place with comm::ResolveRankEnv, and main builds
// the communicator (Gloo on CPU, NCCL on CUDA) that Train uses; ranks other than 0 log
// warnings and errors only.
#include <c10/util/Exception.h>
#include <c10/util/Logging.h>
#include <spdlog/spdlog.h>
#include <torch/cuda.h>
#include <torch/version.h>

#include <cxxopts.hpp>
#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/nccl_info.h"
#include "comm/rank_env.h"
#include "data/data_error.h"
#include "trainer/config/config_loader.h"
#include "trainer/engine/chunk_setup.h"
#include "trainer/io/version.h"
#include "trainer/launcher.h"
#include "trainer/stop_signals.h"
#include "trainer/train_loop.h"
#include "trainer/wait_deadline.h"

namespace {

constexpr char kUsage[] =
    "--config FILE [--set key=value]... [--print-config | --plan]\n\n"
    "Trains a GPT as the YAML config describes. Every key is listed by --config-reference;\n"
    "--set overrides one key (repeatable), its value read as YAML: --set optimizer.betas=[0.9,0.95].\n"
    "${VAR} and ${VAR:-default} in the config read the environment.\n"
    "--nproc N starts N ranks of data-parallel training on this machine (one per GPU, or N CPU processes);\n"
    "under torchrun or srun, ps_train reads the rank from the environment (distributed.launcher).";

// Takes `--nproc N` / `--nproc=N` out of argv; 0 when absent.
int ExtractNproc(int& argc, char** argv) {
  int nproc = 0, out = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    std::string value;
    if (arg == "--nproc") {
      if (i + 1 >= argc) throw ps::trainer::ConfigError("--nproc needs a number of processes");
      value = argv[++i];
    } else if (arg.rfind("--nproc=", 0) == 0) {
      value = arg.substr(8);
    } else {
      argv[out++] = argv[i];
      continue;
    }
    size_t used = 0;
    try {
      nproc = std::stoi(value, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != value.size() || nproc < 1) throw ps::trainer::ConfigError("--nproc " + value + ": expected a count >= 1");
  }
  argc = out;
  return nproc;
}

// Takes `--set k=v` / `--set=k=v` out of argv: cxxopts would split values at commas.
std::vector<std::string> ExtractOverrides(int& argc, char** argv) {
  std::vector<std::string> overrides;
  int out = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--set") {
      if (i + 1 >= argc) throw ps::trainer::ConfigError("--set needs key=value");
      overrides.push_back(argv[++i]);
    } else if (arg.rfind("--set=", 0) == 0) {
      overrides.push_back(arg.substr(6));
    } else {
      argv[out++] = argv[i];
    }
  }
  argc = out;
  return overrides;
}

// This process's place among the ranks, from the launcher's variables; a variable that
// is missing, not a number or out of range is a user error (exit 2), as a bad config is.
ps::comm::RankEnv RankEnvOf(const ps::trainer::Config& config) {
  try {
    return ps::comm::ResolveRankEnv(config.distributed, ps::comm::ProcessEnvGetter());
  } catch (const c10::Error& e) {
    throw ps::trainer::ConfigError(e.what_without_backtrace());
  }
}

// --plan: the memory plan, exit status 0 if the run fits, 3 if not. A ZeRO chunk run's
// plan is per rank: rank 0 of --nproc N, or this rank of the launcher's world.
int PrintPlan(const ps::trainer::Config& config, int nproc) {
  bool fits = false;
  const at::Device device = config.run.device == ps::trainer::DeviceKind::kCuda ? at::kCUDA : at::kCPU;
  const ps::comm::RankEnv env = RankEnvOf(config);
  const int world = nproc > 0 ? nproc : env.world_size;
  const int rank = nproc > 0 ? 0 : env.rank;
  // --nproc N: the N ranks run on this machine, sharing chunk.nvme_dir.
  std::cout << ps::trainer::PlanReport(config, device, &fits, world, rank, nproc > 0 ? nproc : 1);
  return fits ? 0 : 3;
}

// The run on this rank (of the launcher's world, from the rank variables): the log set
// up, the stop signals caught, the communicator connected when there are several ranks.
int TrainOnThisRank(const ps::trainer::Config& config) {
  const ps::comm::RankEnv rank_env = RankEnvOf(config);
  spdlog::set_level(rank_env.rank == 0 ? spdlog::level::from_str(config.logging.level) : spdlog::level::warn);
  spdlog::set_pattern(rank_env.distributed() ? "[%H:%M:%S rank " + std::to_string(rank_env.rank) + "] %v"
                                             : "[%H:%M:%S] %v");
  ps::trainer::StopSignals signals;  // SIGTERM/SIGINT/SIGUSR1: checkpoint, then exit 42
  ps::trainer::TrainOptions train_options;
  train_options.stop_requested = &signals.requested();
  std::unique_ptr<ps::comm::Communicator> communicator;
  if (rank_env.distributed() || config.distributed.force_collectives) {
    const bool cuda = config.run.device == ps::trainer::DeviceKind::kCuda ||
                      (config.run.device == ps::trainer::DeviceKind::kAuto && torch::cuda::is_available());
    spdlog::info("{}: connecting ({})", rank_env.Describe(), cuda ? "NCCL" : "Gloo");
    {  // the rendezvous: a deadline and the stop signals end it even where c10d's store would not
      const ps::trainer::WaitDeadline deadline(
          rank_env.Describe() + ": rendezvous at " + rank_env.master_addr + ":" + std::to_string(rank_env.master_port) +
              " (distributed.init_timeout_s " + std::to_string(config.distributed.init_timeout_s) + ")",
          // Up to three waits of init_timeout_s each: the store, the NCCL id, NCCL's own init.
          std::chrono::seconds(3 * config.distributed.init_timeout_s + 5), &signals.requested());
      communicator = ps::comm::CreateCommunicator(rank_env, config.distributed,
                                                  cuda ? c10::DeviceType::CUDA : c10::DeviceType::CPU);
    }
    train_options.comm = communicator.get();
    train_options.local_rank = rank_env.local_rank;
  }
  const auto result = ps::trainer::Train(config, train_options);
  return result.stop_signal != 0 ? ps::trainer::kExitStoppedBySignal : 0;
}

int Run(int argc, char** argv) {
  const int nproc = ExtractNproc(argc, argv);
  const bool plan_only = std::any_of(argv + 1, argv + argc, [](const char* a) { return std::string(a) == "--plan"; });
  if (nproc > 0 && !plan_only) return ps::trainer::LaunchLocalRanks(nproc, std::vector<std::string>(argv + 1, argv + argc));
  auto overrides = ExtractOverrides(argc, argv);
  cxxopts::Options options("ps_train", kUsage);
  options.add_options()
      ("c,config", "YAML config file", cxxopts::value<std::string>())
      ("set", "override one key: --set key=value (repeatable)")
      ("print-config", "print the resolved config as YAML and exit")
      ("plan", "print the memory plan (model data per tier, largest model that fits, whether this run fits) "
               "without allocating, and exit: 0 if it fits, 3 if not")
      ("config-reference", "print every config key (type, default, meaning) as Markdown and exit")
      ("version", "print versions of ps_train, LibTorch and NCCL and exit")
      ("nproc", "start N local ranks of data-parallel training (torchrun variables set for each)",
       cxxopts::value<int>())
      ("h,help", "show this help");
  auto args = options.parse(argc, argv);
  if (args.count("help")) {
    std::cout << options.help() << std::endl;
    return 0;
  }
  if (args.count("version")) {
    std::cout << "ps_train " << ps::trainer::kVersion << " | LibTorch " << TORCH_VERSION_MAJOR << "." << TORCH_VERSION_MINOR << "."
              << TORCH_VERSION_PATCH << " | " << ps::comm::NcclVersionString() << std::endl;
    return 0;
  }
  if (args.count("config-reference")) {
    std::cout << ps::trainer::ConfigReferenceMarkdown();
    return 0;
  }
  if (!args.count("config")) throw ps::trainer::ConfigError("--config FILE is required (see --help)");
  if (!args.unmatched().empty()) {
    throw ps::trainer::ConfigError("unexpected argument '" + args.unmatched().front() + "' (see --help)");
  }
  const auto config = ps::trainer::LoadConfigFile(args["config"].as<std::string>(), overrides,
                                                  ps::trainer::ProcessEnv());
  if (args.count("print-config")) {
    std::cout << ps::trainer::ConfigToYaml(config);
    return 0;
  }
  if (args.count("plan")) return PrintPlan(config, nproc);
  return TrainOnThisRank(config);
}

}  // namespace

int main(int argc, char** argv) {
  // c10's own warnings (c10d's store logs pages of stack frames once a peer is gone,
  // which the error ps_train prints already explains) only when TORCH_CPP_LOG_LEVEL
  // asks for them.
  if (std::getenv("TORCH_CPP_LOG_LEVEL") == nullptr) FLAGS_caffe2_log_level = c10::GLOG_ERROR;
  try {
    return Run(argc, argv);
  } catch (const ps::trainer::ConfigError& e) {
    std::cerr << "ps_train: error: " << e.what() << std::endl;
    return 2;
  } catch (const ps::data::DataError& e) {  // a bad token file: a user error like a bad config
    std::cerr << "ps_train: error: " << e.what() << std::endl;
    return 2;
  } catch (const cxxopts::exceptions::exception& e) {
    std::cerr << "ps_train: error: " << e.what() << " (see --help)" << std::endl;
    return 2;
  } catch (const c10::Error& e) {
    std::cerr << "ps_train: error: " << e.what_without_backtrace() << std::endl;
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "ps_train: error: " << e.what() << std::endl;
    return 1;
  }
}
