// ChunkSetup: the chunk memory manager of one run (store, runtime, chunk Adam, model
// hooks, loss scaler), built from the config; and the memory plan of a config (`ps_train --plan`).
// Both come from one PlanRun: the same budgets, and the run's runtime is given the
// tier plan the memory plan computed (RuntimeOptions::tiers).
#pragma once

#include <c10/core/Device.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chunkmem/chunk_store.h"
#include "chunkmem/copy_engine.h"
#include "chunkmem/memory_plan.h"
#include "chunkmem/memory_probe.h"
#include "chunkmem/runtime.h"
#include "chunkmem/timeline.h"
#include "comm/communicator.h"
#include "models/param_init.h"
#include "models/trainable.h"
#include "optim/hybrid_adam.h"
#include "optim/loss_scaler.h"
#include "trainer/config/config.h"
#include "trainer/engine/chunk_hooks.h"

namespace ps::trainer {

struct ChunkBudgets {
  int64_t device_bytes = 0;  // "unlimited" (simulated, budget 0) is kUnlimitedBytes
  int64_t host_bytes = 0;
  bool simulated = true;     // device tier is host memory with its own budget
  // Traced budget: chunks + non-model memory within this many device bytes (0 = the
  // fixed device_bytes budget). device_bytes is then this too (the hard cap).
  int64_t traced_capacity_bytes = 0;
};
constexpr int64_t kUnlimitedBytes = int64_t{1} << 62;

// chunk.device_tier/device_budget_bytes/host_budget_bytes for a run on `device`.
// Throws ConfigError for combinations that cannot work (e.g. cuda tier on a CPU run).
ChunkBudgets ResolveChunkBudgets(const Config& config, at::Device device);

struct ChunkSetup {
  std::unique_ptr<chunkmem::ChunkStore> store;
  std::unique_ptr<chunkmem::DeviceMemoryProbe> probe;  // traced budget only
  std::unique_ptr<chunkmem::CopyEngine> copies;        // chunk.async_prefetch only
  std::unique_ptr<chunkmem::ChunkRuntime> runtime;
  std::unique_ptr<optim::HybridAdam> adam;
  std::unique_ptr<optim::LossScaler> scaler;
  std::unique_ptr<ChunkLayerHooks> hooks;
  std::unique_ptr<chunkmem::ChunkTimeline> timeline;  // while chunk.timeline_steps are recorded
  std::vector<std::string> host_param_names;           // outside the chunks (chunk.cpu_embedding)
  // chunk.cpu_embedding of a frozen base (LoRA): fp32 on the host, no optimizer state;
  // written by Load, in the base's fingerprint, not saved.
  std::vector<std::pair<std::string, at::Tensor>> frozen_host_params;
};

// Moves `model`'s parameters into chunks (the model keeps its modules; its parameter
// tensors are bound to chunk slots while in use), placed as PlanRun(config) says;
// throws ConfigError with the plan's reason when it does not fit. The runtime writes
// the initial values (model.InitParameter) in the chunk slots as `init` says; the
// model's own storage is never read.
// `comm`: the ranks of a ZeRO run (null = one process; not owned): the runtime shards
// the chunks over them and the plan is this rank's.
ChunkSetup MakeChunkSetup(models::TrainableModel& model, const Config& config, at::Device device,
                          const models::InitPlan& init, comm::Communicator* comm = nullptr);

// The memory plan of a run, from the model's shapes alone (nothing allocated): what
// `--plan` prints and what MakeChunkSetup places chunks by (and refuses by, with the
// same reason).
struct RunPlan {
  ChunkBudgets budgets;
  chunkmem::PlanInput input;
  chunkmem::MemoryPlan plan;
  int64_t activation_bytes = 0;  // estimated, per micro-batch (vertical: the step's kept inputs)
};
// Throws ConfigError for train.accumulation_schedule: vertical where it is not built: a
// chunk run over ranks (ZeRO, `world_size` > 1 or distributed.force_collectives).
void CheckAccumulationSchedule(const Config& config, int world_size);

// `world_size`, `rank`: the plan of that rank of a ZeRO run (chunkmem::PlanInput).
RunPlan PlanRun(const Config& config, at::Device device, int world_size = 1, int rank = 0);

// Why a run with `run_plan` cannot start (empty: it can): the plan does not fit its
// budgets, or chunk.nvme_dir cannot hold `nvme_dir_bytes` (this rank's tier file, or,
// with `sharing_ranks` > 1, the files of that many ranks of this machine sharing the
// directory: the message then names both figures). What MakeChunkSetup, the trainer's
// start and `--plan` refuse by (plan_refusal.cc).
std::string PlanRefusal(const Config& config, const RunPlan& run_plan, int64_t nvme_dir_bytes,
                        int sharing_ranks = 1);

// The `--plan` report for `config`: model data per tier, the largest model the budgets
// hold, and whether this run fits (and, with chunk.nvme_dir, whether the directory can
// hold the tier files of the first `local_ranks` ranks, which one machine runs: a
// "refused" line). Allocates nothing. Sets `fits`.
// `world_size`, `rank`: the plan of that rank of a ZeRO run.
std::string PlanReport(const Config& config, at::Device device, bool* fits, int world_size = 1, int rank = 0,
                       int local_ranks = 1);

}  // namespace ps::trainer
