// PlanRefusal and PlanReport (chunk_setup.h): the refusals a chunk run's memory plan
// leads to, shared by MakeChunkSetup, the trainer's start (trainer/run_preflight.h) and
// `ps_train --plan`, so all three refuse the same runs with the same reason.
#include <string>

#include "chunkmem/nvme_file.h"
#include "trainer/engine/chunk_setup.h"

namespace ps::trainer {

std::string PlanRefusal(const Config& c, const RunPlan& run_plan, int64_t nvme_dir_bytes, int sharing_ranks) {
  if (!run_plan.plan.fits) return "this run does not fit its memory budgets: " + run_plan.plan.why_not;
  if (c.chunk.nvme_dir.empty()) return "";
  // A directory named is one meant to work: checked even when the plan puts nothing there this run.
  const std::string refusal = chunkmem::CheckNvmeDir(c.chunk.nvme_dir, nvme_dir_bytes);
  if (refusal.empty()) return "";
  const int64_t chunks = run_plan.plan.tiers.nvme_chunks, bytes = run_plan.plan.tiers.nvme_bytes;
  const std::string sharing = sharing_ranks > 1 ? " on this rank; " + std::to_string(nvme_dir_bytes) +
                                                      " bytes for the " + std::to_string(sharing_ranks) +
                                                      " ranks of this machine sharing the directory"
                                                : "";
  return "chunk.nvme_dir: " + refusal +
         (chunks > 0 ? " (the plan puts the optimizer state of " + std::to_string(chunks) + " chunks there: " +
                           std::to_string(bytes) + " bytes" + sharing + ")"
                     : " (the plan puts no optimizer state there this run: 0 bytes" + sharing + ")");
}

std::string PlanReport(const Config& c, at::Device device, bool* fits, int world_size, int rank, int local_ranks) {
  const RunPlan r = PlanRun(c, device, world_size, rank);
  // Beyond the plan's own verdict (its "fits" line): the directory of the NVMe tier, which
  // the first `local_ranks` ranks (one machine's, --nproc) share.
  int64_t bytes = r.plan.tiers.nvme_bytes;
  if (local_ranks > 1 && !c.chunk.nvme_dir.empty()) {
    bytes = 0;
    for (int k = 0; k < local_ranks; ++k) bytes += PlanRun(c, device, world_size, k).plan.tiers.nvme_bytes;
  }
  const std::string refusal = r.plan.fits ? PlanRefusal(c, r, bytes, local_ranks) : "";
  *fits = r.plan.fits && refusal.empty();
  std::string head = "memory plan for '" + c.run.name + "' (" + optim::ToString(c.precision.dtype) + ", " +
                     (r.budgets.simulated ? "simulated device" : "CUDA device") + ")\n";
  return head + chunkmem::FormatPlan(r.plan, r.input) + (refusal.empty() ? "" : "refused           " + refusal + "\n");
}

}  // namespace ps::trainer
