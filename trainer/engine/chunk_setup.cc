#include "trainer/engine/chunk_setup.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "chunkmem/master_rule.h"
#include "chunkmem/memory_plan.h"
#include "optim/cpu_topology.h"
#include "trainer/config/config_loader.h"
#include "trainer/engine/model_factory.h"

namespace ps::trainer {

ChunkBudgets ResolveChunkBudgets(const Config& c, at::Device device) {
  const auto& cc = c.chunk;
  const bool on_cuda = device.is_cuda();
  ChunkBudgets b;
  b.simulated = cc.device_tier == chunkmem::DeviceTierKind::kSimulated ||
                (cc.device_tier == chunkmem::DeviceTierKind::kAuto && !on_cuda);
  if (cc.device_tier == chunkmem::DeviceTierKind::kCuda && !on_cuda) {
    throw ConfigError("chunk.device_tier: cuda needs run.device cuda (this run trains on " + device.str() + ")");
  }
  if (b.simulated && on_cuda) throw ConfigError("chunk.device_tier: simulated needs run.device cpu");
  b.device_bytes = cc.device_budget_bytes;
  if (b.device_bytes > 0 && cc.device_memory_bytes > 0) {
    throw ConfigError("chunk.device_memory_bytes: set either chunk.device_budget_bytes (a fixed chunk budget) or "
                      "chunk.device_memory_bytes (a traced one), not both");
  }
  if (cc.placement == chunkmem::PlacementKind::kStatic && (b.device_bytes > 0 || (b.simulated && cc.device_memory_bytes == 0))) {
    throw ConfigError("chunk.placement: static needs a traced budget (chunk.device_memory_bytes, or CUDA without "
                      "chunk.device_budget_bytes); a fixed budget is static already");
  }
  if (b.device_bytes == 0) {
    if (!b.simulated || cc.device_memory_bytes > 0) {
      const int64_t memory = cc.device_memory_bytes > 0 ? cc.device_memory_bytes : chunkmem::CudaDeviceTotalBytes(device);
      b.traced_capacity_bytes = static_cast<int64_t>(cc.device_mem_ratio * static_cast<double>(memory));
      b.device_bytes = b.traced_capacity_bytes;
    } else {
      b.device_bytes = kUnlimitedBytes;
    }
  }
  b.host_bytes = cc.host_budget_bytes;
  if (b.host_bytes == 0) {
    b.host_bytes = static_cast<int64_t>(cc.host_mem_ratio * static_cast<double>(sysconf(_SC_PHYS_PAGES)) *
                                        static_cast<double>(sysconf(_SC_PAGESIZE)));
  }
  return b;
}

namespace {

// Micro-batches whose activations live at once: the vertical schedule keeps each one's
// block inputs until the step's one backward.
int64_t MicroBatchesKept(const Config& c, int world_size) {
  return VerticalAccumulation(c.train, world_size) ? GradAccumSteps(c.train, world_size) : 1;
}

// PatrickStar's reuse: safe with one backward per step and a compute dtype not the master's.
// ZeRO reduces gradients in fp32 group buffers, then (one micro-batch per step) into the
// owned compute slots: 14/p bytes per parameter.
// Without an fp32 master the compute slots hold the weights' only copy: never.
bool GradsInComputeChunks(const Config& c, int world_size) {
  return c.precision.dtype != optim::Dtype::kFp32 && GradAccumSteps(c.train, world_size) == 1 &&
         c.optimizer.master_weights == optim::MasterWeights::kFp32;
}

bool MasterWeights(const Config& c) { return c.optimizer.master_weights == optim::MasterWeights::kFp32; }

// chunk.cpu_embedding: the position embedding, and the token embedding unless it is
// tied to the LM head (then it is used on the device too), live outside the chunks.

// How the chunks store Adam's m and v (optimizer.state_dtype; kByte: 8-bit codes and scales).
at::ScalarType StateDtypeOf(const optim::OptimizerConfig& o) {
  switch (o.state_dtype) {
    case optim::StateDtype::kFp32: return at::kFloat;
    case optim::StateDtype::kBf16: return at::kBFloat16;
    case optim::StateDtype::kInt8: return at::kByte;
  }
  return at::kFloat;
}

chunkmem::RuntimeOptions RuntimeOptionsOf(const Config& c, int world_size) {
  chunkmem::RuntimeOptions options;
  options.chunk_numel = c.chunk.size_elements;
  options.compute_dtype = c.precision.dtype == optim::Dtype::kBf16   ? at::kBFloat16
                          : c.precision.dtype == optim::Dtype::kFp16 ? at::kHalf
                                                                     : at::kFloat;
  options.state_dtype = StateDtypeOf(c.optimizer);
  options.residency.eviction = c.chunk.eviction;
  options.residency.warmup_steps = c.chunk.warmup_steps;
  options.residency.prefetch_depth = c.chunk.prefetch_depth;
  options.residency.static_budgets = c.chunk.placement == chunkmem::PlacementKind::kStatic;
  options.grads_in_compute_chunks = GradsInComputeChunks(c, world_size);
  options.master_weights = MasterWeights(c);
  options.block_major_backward = VerticalAccumulation(c.train, world_size);
  options.keep_values_at_exit = false;  // the engine's model goes with the runtime
  options.nvme.dir = c.chunk.nvme_dir;
  options.nvme.ring_slots = static_cast<int>(c.chunk.nvme_ring_slots);
  return options;
}

// The run's plan, refused (with the plan's reason) before anything is allocated when
// it does not fit; a stated device memory below the card's caps the caching allocator.
RunPlan FittingPlan(const Config& c, at::Device device, int world, int rank) {
  RunPlan run_plan = PlanRun(c, device, world, rank);
  const std::string refusal = PlanRefusal(c, run_plan, run_plan.plan.tiers.nvme_bytes);
  if (!refusal.empty()) throw ConfigError(refusal);
  // A stated device memory below the card's is a hard limit: the caching allocator is
  // capped there, so going beyond it is an out-of-memory error, as on a card that small.
  if (device.is_cuda() && c.chunk.device_memory_bytes > 0 &&
      c.chunk.device_memory_bytes < chunkmem::CudaDeviceTotalBytes(device)) {
    chunkmem::CapCudaMemory(device, c.chunk.device_memory_bytes);
  }
  return run_plan;
}

// The store (host pool sized by the plan, device arena or allocator), its copy engine
// and memory probe. Returns the seconds the host pool took.
double MakeStore(ChunkSetup& s, const Config& c, at::Device device, const RunPlan& run_plan) {
  const ChunkBudgets& budgets = run_plan.budgets;
  const auto pool_start = std::chrono::steady_clock::now();
  const bool arena = c.chunk.device_arena && budgets.traced_capacity_bytes == 0 && budgets.device_bytes < kUnlimitedBytes;
  s.store = std::make_unique<chunkmem::ChunkStore>(
      chunkmem::MakeHostPoolAllocator(/*pinned=*/device.is_cuda(), run_plan.plan.tiers.host_chunk_bytes,
                                      chunkmem::HostPoolMaxPayloads(run_plan.plan.layout.num_chunks()),
                                      c.chunk.host_pool_pinning),
      arena ? chunkmem::MakeArenaAllocator(device, budgets.device_bytes) : chunkmem::MakeDeviceAllocator(device),
      budgets.host_bytes, budgets.device_bytes);
  const double pool_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - pool_start).count();
  if (c.chunk.async_prefetch) {
    s.copies = device.is_cuda() ? chunkmem::MakeCudaCopyEngine(device) : chunkmem::MakeThreadCopyEngine();
    s.store->set_copy_engine(s.copies.get());
  }
  if (budgets.traced_capacity_bytes > 0) {
    s.probe = device.is_cuda() ? chunkmem::MakeCudaMemoryProbe(device, *s.store) : chunkmem::MakeCpuMemoryProbe();
    s.store->set_memory_probe(s.probe.get());
  }
  return pool_s;
}

using HostParams = std::vector<std::pair<std::string, at::Tensor>>;

// The model's block parameters the chunks manage; the rest (chunk.cpu_embedding) stay
// fp32 tensors on the host, initialised here, into `host_params` (trained by the
// optimizer) or `frozen_host` (a LoRA run's base).
std::vector<chunkmem::ManagedParam> ManagedParams(models::TrainableModel& model, const Config& c,
                                                  const models::InitPlan& init, HostParams& host_params,
                                                  HostParams& frozen_host) {
  std::vector<chunkmem::ManagedParam> params;
  for (const auto& p : model.BlockParameters()) {
    if (EmbeddingOnHost(c, p.name)) {
      at::Tensor param = p.tensor;
      param.set_data(param.data().to(at::kCPU, at::kFloat).contiguous());
      if (init.Initialises(p.name)) model.InitParameter(p.name, param.detach(), init.seed);
      (param.requires_grad() ? host_params : frozen_host).emplace_back(p.name, param);
      continue;
    }
    params.push_back({p.name, p.tensor, p.used_by_blocks});
  }
  return params;
}

// The runtime over `params`, placed as the plan decided, writing the initial values
// itself (model.InitParameter, as `init` says).
void MakeRuntime(ChunkSetup& s, models::TrainableModel& model, const Config& c, const models::InitPlan& init,
                 std::vector<chunkmem::ManagedParam> params, const RunPlan& run_plan, comm::Communicator* comm) {
  chunkmem::RuntimeOptions options = RuntimeOptionsOf(c, comm != nullptr ? comm->world_size() : 1);
  options.comm = comm;  // MakeEngine passes one only for a data-parallel run
  options.residency.device_memory_bytes = run_plan.budgets.traced_capacity_bytes;
  options.tiers = run_plan.plan.tiers;  // the plan's, as `--plan` prints it
  std::vector<std::string> names;
  for (const auto& p : params) names.push_back(p.name);
  options.initial_values = [&model, init, names](int index, at::Tensor values) {  // in the constructor only
    if (!init.Initialises(names[index])) return false;
    model.InitParameter(names[index], std::move(values), init.seed);
    return true;
  };
  s.runtime = std::make_unique<chunkmem::ChunkRuntime>(std::move(params), *s.store, options);
  s.runtime->set_memory_probe(s.probe.get());
}

void LogStartup(const ChunkSetup& s, const Config& c, at::Device device, const RunPlan& run_plan, double pool_s) {
  const auto& startup = s.runtime->startup_seconds();
  spdlog::info("chunk start-up: host pool of {:.2f} GiB ({}) reserved in {:.1f} s; payloads allocated in {:.1f} s, "
               "zeroed in {:.1f} s; initial values written in {:.1f} s",
               s.store->stats().host_pool_bytes / 1073741824.0,
               !device.is_cuda()                                                  ? "pageable"
               : c.chunk.host_pool_pinning == chunkmem::HostPoolPinning::kRegister ? "pinned: mapped, cudaHostRegister"
                                                                                  : "pinned: cudaHostAlloc",
               pool_s, startup.allocate_s, startup.zero_s, startup.initial_values_s);
}

// optimizer.cpu_adam, pin_cpu_threads and the speculation settings for this machine;
// throws ConfigError for a kernel variant this CPU lacks.
optim::HybridAdamOptions HybridAdamOptionsOf(const Config& c, at::Device device) {
  optim::HybridAdamOptions adam;
  adam.optimizer = c.optimizer;
  adam.cpu_threads = CpuThreads(c.run);
  adam.pipeline_simulated = c.chunk.simulate_device_copies && !device.is_cuda();
  adam.rounding_seed = static_cast<uint64_t>(c.run.seed);
  switch (c.optimizer.cpu_adam) {
    case optim::CpuAdamChoice::kAuto: adam.cpu_isa = optim::BestCpuIsa(); break;
    case optim::CpuAdamChoice::kScalar: adam.cpu_isa = optim::CpuIsa::kScalar; break;
    case optim::CpuAdamChoice::kAvx2: adam.cpu_isa = optim::CpuIsa::kAvx2; break;
    case optim::CpuAdamChoice::kAvx512: adam.cpu_isa = optim::CpuIsa::kAvx512; break;
  }
  if (!optim::CpuSupports(adam.cpu_isa)) {
    throw ConfigError(std::string("optimizer.cpu_adam: this CPU does not support the ") + optim::ToString(adam.cpu_isa) +
                      " variant (use auto)");
  }
  if (c.optimizer.pin_cpu_threads) {
    const int node = device.is_cuda() ? optim::CudaDeviceNumaNode(device.has_index() ? device.index() : 0) : -1;
    adam.pin_cpus = optim::PhysicalCoreCpus(optim::AllowedCpus(), node);
    if (!adam.pin_cpus.empty()) adam.cpu_threads = std::min<int>(adam.cpu_threads, static_cast<int>(adam.pin_cpus.size()));
    std::string cpus;
    for (int cpu : adam.pin_cpus) cpus += (cpus.empty() ? "" : ",") + std::to_string(cpu);
    spdlog::info("host Adam: {} threads pinned to CPUs {} (one per physical core; NUMA node {} first)",
                 adam.cpu_threads, cpus, node);
  }
  adam.speculation_slots = static_cast<int>(c.optimizer.speculation_slots);
  adam.speculation_backoff_steps = static_cast<int>(c.optimizer.speculation_backoff_steps);
  return adam;
}

// The hybrid Adam over the runtime (speculating from the gradient hooks when it has
// slots) and the parameters kept outside the chunks.
void MakeOptimizer(ChunkSetup& s, const Config& c, at::Device device, const HostParams& host_params) {
  const optim::HybridAdamOptions adam = HybridAdamOptionsOf(c, device);
  s.adam = std::make_unique<optim::HybridAdam>(*s.runtime, adam);
  if (adam.speculation_slots > 0 && device.is_cuda() && !c.chunk.async_prefetch) {
    spdlog::warn("optimizer.speculation_slots without chunk.async_prefetch: a chunk whose gradients are on the GPU "
                 "is copied to the host synchronously in backward (set chunk.async_prefetch: true to overlap it)");
  }
  if (adam.speculation_slots > 0) {
    s.runtime->set_on_grads_final([optimizer = s.adam.get()](int chunk) { optimizer->Speculate(chunk); });
  }
  for (const auto& [name, param] : host_params) {
    s.adam->AddHostParam(name, param);
    s.host_param_names.push_back(name);
  }
}

}  // namespace

ChunkSetup MakeChunkSetup(models::TrainableModel& model, const Config& c, at::Device device,
                          const models::InitPlan& init, comm::Communicator* comm) {
  const int world = comm != nullptr ? comm->world_size() : 1;
  const int rank = comm != nullptr ? comm->rank() : 0;
  // The run places its chunks by the plan `--plan` prints, and refuses what it refuses,
  // with the same reason, before allocating anything.
  const RunPlan run_plan = FittingPlan(c, device, world, rank);
  ChunkSetup s;
  const double pool_s = MakeStore(s, c, device, run_plan);
  model.set_save_weight_leaves(true);  // no saved views pinning evicted chunk payloads
  HostParams host_params;  // chunk.cpu_embedding
  MakeRuntime(s, model, c, init, ManagedParams(model, c, init, host_params, s.frozen_host_params), run_plan, comm);
  LogStartup(s, c, device, run_plan, pool_s);
  MakeOptimizer(s, c, device, host_params);
  if (c.chunk.cpu_embedding) model.set_host_embedding(true, device, s.runtime->compute_dtype());
  s.scaler = std::make_unique<optim::LossScaler>(c.precision);
  s.hooks = std::make_unique<ChunkLayerHooks>(*s.runtime);
  if (c.chunk.timeline_steps > 0 && rank == 0) {  // one file: rank 0's chunks
    s.timeline = std::make_unique<chunkmem::ChunkTimeline>();
    s.runtime->set_timeline(s.timeline.get());
  }
  return s;
}

void CheckAccumulationSchedule(const Config& c, int world_size) {
  if (VerticalAccumulation(c.train, world_size) && c.chunk.enabled && (world_size > 1 || c.distributed.force_collectives)) {
    throw ConfigError("train.accumulation_schedule: vertical is not built for chunk runs over ranks (ZeRO reduces "
                      "gradients per micro-batch); use horizontal, or plain data parallelism (chunk.enabled: false)");
  }
}

namespace {

// The chunk room on the device and how messages name it: the fixed budget; or a traced
// capacity shared with the activations, the chunks getting what they leave
// (chunk.placement static: at most the warm-up share of it).
void SetDeviceRoom(const Config& c, const ChunkBudgets& budgets, int64_t activation_bytes, chunkmem::PlanInput& input) {
  input.device_capacity_bytes = budgets.device_bytes;
  input.device_budget_bytes = budgets.device_bytes;
  input.device_room_name = budgets.device_bytes >= kUnlimitedBytes ? "the simulated device"
                           : "the device budget of " + std::to_string(budgets.device_bytes) +
                                 " bytes (chunk.device_budget_bytes)";
  if (budgets.traced_capacity_bytes == 0) return;
  const auto share = static_cast<int64_t>(c.chunk.warmup_device_chunk_ratio *
                                          static_cast<double>(budgets.traced_capacity_bytes));
  input.warmup_share_bytes = share;
  input.device_budget_bytes = std::max<int64_t>(0, budgets.traced_capacity_bytes - activation_bytes);
  input.device_room_name = "the traced device capacity of " + std::to_string(budgets.traced_capacity_bytes) +
                           " bytes (chunk.device_memory_bytes x chunk.device_mem_ratio) less the activation "
                           "estimate of " + std::to_string(activation_bytes) + " bytes";
  if (c.chunk.placement == chunkmem::PlacementKind::kStatic) {
    input.device_budget_bytes = std::min(input.device_budget_bytes, share);
    input.device_room_name += ", at most the warm-up share of " + std::to_string(share) + " bytes (static)";
  }
}

// What the plan prints about the activations beside the chunks.
std::string NonModelNote(const Config& c, const ChunkBudgets& budgets, int world_size) {
  const int64_t kept = MicroBatchesKept(c, world_size);
  std::string note = kept > 1 ? "the block inputs of the step's " + std::to_string(kept) +
                                    " micro-batches (vertical schedule) and one block recomputed, "
                                    "estimated from the model shape; "
                              : "per micro-batch, estimated from the model shape; ";
  note += budgets.traced_capacity_bytes > 0 ? "taken off the traced device capacity, the warm-up measures the real peak"
          : budgets.device_bytes >= kUnlimitedBytes ? "the simulated device has no limit"
                                                    : "needed on the device besides the fixed chunk budget";
  return note;
}

// The model's parameters (those outside the chunks counted apart), the dtype and the
// gradient path, and the optimizer's host buffers.
void SetModelAndOptimizer(const Config& c, int world_size, chunkmem::PlanInput& input) {
  for (const auto& p : ParameterShapesOf(c)) {
    if (EmbeddingOnHost(c, p.name)) {
      (p.frozen ? input.frozen_host_param_numel : input.host_param_numel) += p.numel;
    } else {
      input.params.push_back({p.name, p.numel, p.used_by_blocks, p.frozen});
    }
  }
  input.chunk_numel = c.chunk.size_elements;
  input.compute_element_bytes = c.precision.dtype == optim::Dtype::kFp32 ? 4 : 2;
  input.state_element_bytes = static_cast<int64_t>(c10::elementSize(StateDtypeOf(c.optimizer)));
  input.grads_in_compute_chunks = GradsInComputeChunks(c, world_size);
  input.master_weights = MasterWeights(c);
  input.block_major_grads = VerticalAccumulation(c.train, world_size);
  input.host_scratch_chunks = chunkmem::ChunkRuntime::HostGradScratchChunks(input.grads_in_compute_chunks);
  // Speculation backups: the master (fp32, or bf16 weights without one), m, v (+ the
  // compute chunk when it is separate from the master) per slot.
  input.speculation_slots = c.optimizer.speculation_slots;
  // (8-bit moments with their block scales: counted as 2 bytes each, a little more.)
  const int64_t compute = input.compute_element_bytes;
  input.backup_bytes_per_element = chunkmem::UpdatedWeightBytes(compute, input.master_weights) +
                                   2 * std::max<int64_t>(2, input.state_element_bytes) +
                                   (chunkmem::SeparateMaster(compute, input.master_weights) ? compute : 0);
  input.margin_use_ratio = c.optimizer.hybrid_adam ? c.chunk.margin_use_ratio : 0.0;
  input.nvme = !c.chunk.nvme_dir.empty();
  input.nvme_host_budget_bytes = c.chunk.nvme_host_budget_bytes;
  input.nvme_ring_slots = c.chunk.nvme_ring_slots;
}

}  // namespace

RunPlan PlanRun(const Config& c, at::Device device, int world_size, int rank) {
  // The batch must divide over this world's ranks (the loader checked one rank only):
  // a ConfigError naming global_batch_size, micro_batch_size and the rank count.
  GradAccumSteps(c.train, world_size);
  CheckAccumulationSchedule(c, world_size);
  RunPlan r;
  chunkmem::PlanInput& input = r.input;
  input.world_size = world_size;
  input.rank = rank;
  input.zero = world_size > 1 || c.distributed.force_collectives;
  input.prefetch_groups = c.chunk.prefetch_depth > 0;
  r.budgets = ResolveChunkBudgets(c, device);
  SetModelAndOptimizer(c, world_size, input);
  r.activation_bytes = ActivationBytesOf(c, c.train.micro_batch_size * c.data.seq_len, input.compute_element_bytes,
                                         MicroBatchesKept(c, world_size));
  SetDeviceRoom(c, r.budgets, r.activation_bytes, input);
  input.host_budget_bytes = r.budgets.host_bytes;
  input.non_model_bytes = r.activation_bytes;
  input.non_model_note = NonModelNote(c, r.budgets, world_size);
  r.plan = chunkmem::PlanMemory(input);
  const int64_t traced = r.budgets.traced_capacity_bytes;
  if (traced > 0 && r.activation_bytes >= traced) {
    r.plan.fits = false;
    r.plan.why_not = "the activations (~" + std::to_string(r.activation_bytes >> 20) + " MiB, estimated) fill the "
                     "traced device capacity of " + std::to_string(traced >> 20) +
                     " MiB (lower train.micro_batch_size or turn on model.activation_checkpointing)";
  }
  return r;
}

}  // namespace ps::trainer
