// ChunkConfig: settings of the chunk-based memory manager, owned by chunkmem/.
// Plain data; trainer/ parses YAML (and PatrickStar's seed keys) into it.
#pragma once

#include <cstdint>
#include <string>

namespace ps::chunkmem {

enum class DeviceTierKind { kAuto, kCuda, kSimulated };
enum class EvictionPolicyKind { kOpt, kLru };
// chunk.placement (where chunks sit from start-up is another thing, the TierPlan of
// tier_plan.h; docs/chunkmem.md, "Names"): with a traced budget, dynamic: after warm-up
// each moment's chunk budget is what the trace says activations leave; static: the
// warm-up share forever (PatrickStar's with_static_partition).
enum class PlacementKind { kDynamic, kStatic };
// How the host pool is made page-locked on CUDA (start-up): one
// cudaHostAlloc, or mapped and made resident on many threads, then one cudaHostRegister.
enum class HostPoolPinning { kHostAlloc, kRegister };

struct ChunkConfig {
  bool enabled = false;             // manage model data in chunks (else plain LibTorch)
  int64_t size_elements = 32 * 1024 * 1024;  // chunk capacity in elements; 0 = auto (least waste)
  DeviceTierKind device_tier = DeviceTierKind::kAuto;  // auto: CUDA when training on CUDA, else simulated
  int64_t device_budget_bytes = 0;  // fixed chunk bytes allowed on the device; 0 = traced (see below)
  // Traced budget: device memory for chunks plus non-model memory (activations...),
  // times device_mem_ratio; the chunks get what the warm-up trace leaves at each moment.
  // 0 = the whole CUDA device; on the simulated tier 0 = no limit at all.
  int64_t device_memory_bytes = 0;
  // With a fixed device budget: reserve it once as an arena and carve chunks from it
  // (exact budget, no allocator calls while training); else allocate per move.
  bool device_arena = false;
  // Prefetch copies run on a copy engine while compute goes on (CUDA: a side stream;
  // simulated tier: a worker thread); each chunk is waited for at its first use.
  bool async_prefetch = false;
  // Tests, simulated device tier only: the optimizer treats device-tier chunks as memory
  // the CPU kernels cannot read, so it takes the CUDA paths (chunks to the host and back,
  // staged parameters, speculation's copies) without a GPU. No effect on CUDA.
  bool simulate_device_copies = false;
  int64_t host_budget_bytes = 0;    // chunk bytes allowed on the host; 0 = host_mem_ratio x RAM
  HostPoolPinning host_pool_pinning = HostPoolPinning::kHostAlloc;  // CUDA only
  PlacementKind placement = PlacementKind::kDynamic;  // with a traced budget (see above)
  EvictionPolicyKind eviction = EvictionPolicyKind::kOpt;  // opt: Belady from the warm-up trace (LRU until then)
  int64_t warmup_steps = 1;         // optimizer steps traced before Belady decides
  int64_t prefetch_depth = 1;       // moments ahead fetched from the trace after warm-up; 0 = off
  int64_t timeline_steps = 2;       // steps recorded into <output_dir>/chunk_timeline.json; 0 = off
  bool cpu_embedding = false;       // embeddings on the host in fp32 (use_cpu_embedding)
  double device_mem_ratio = 0.8;    // usable fraction of device memory (overall_gpu_mem_ratio)
  double host_mem_ratio = 0.8;      // usable fraction of host memory (overall_cpu_mem_ratio)
  double warmup_device_chunk_ratio = 0.1;  // device fraction for chunks during warm-up
  double margin_use_ratio = 0.8;    // fraction of the device margin for optimizer state, from start-up
  // The NVMe tier (docs/chunkmem.md, "NVMe tier"): a directory on a local disk where the
  // optimizer state of host-updated chunks that host memory does not keep lives; empty = off.
  std::string nvme_dir;
  // Host bytes for optimizer state kept in memory when nvme_dir is set; -1 = what the
  // host budget leaves after everything else (0: all host-updated state on the tier).
  int64_t nvme_host_budget_bytes = -1;
  int64_t nvme_ring_slots = 4;      // host buffers the tier's chunks stream through
};

}  // namespace ps::chunkmem
