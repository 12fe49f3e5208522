// Start-up: every chunk's payloads added to the store and the parameters' values written
// into them (docs/chunkmem.md, "Start-up").
//
// Per layout chunk, kinds compute (compute dtype, host tier), grad (fp32, host; the
// compute chunk itself when gradients reuse the compute slots; the compute dtype without
// an fp32 master), master (fp32 on the optimizer's tier; the compute chunk in fp32 or
// without a master: SeparateMaster), Adam m and v (state_dtype: fp32, bf16, or kByte for
// 8-bit state, optimizer's tier; StatePayloadNumel).
// A chunk this rank does not own (ZeRO) gets a compute entry without payload only.
// Payloads are allocated uninitialised and zeroed on many threads, a chunk holding
// values only where no parameter lies, so no byte is written twice; initial values are
// written one parameter per task on many threads.
#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <functional>
#include <vector>

#include "chunkmem/chunk_store.h"
#include "chunkmem/layout.h"
#include "chunkmem/master_rule.h"
#include "chunkmem/nvme_state.h"
#include "chunkmem/state_layout.h"

namespace ps::chunkmem {

enum class ChunkKind { kCompute, kGrad, kMaster, kAdamM, kAdamV };

// Elements (of the state dtype) of an m or v payload for a chunk of `capacity_numel`
// (chunkmem/state_layout.h: kByte is 8-bit codes and their block scales).
inline int64_t StatePayloadNumel(int64_t capacity_numel, at::ScalarType state_dtype) {
  return state_dtype == at::kByte ? StatePayloadBytes(capacity_numel, 1) : capacity_numel;
}
constexpr int kNumChunkKinds = 5;

// master_rule.h's rule for a compute dtype: whether the fp32 master is a chunk kind of
// its own (otherwise kMaster is the compute chunk), and a grad chunk's dtype (the update
// reads gradients of any float dtype).
inline bool SeparateMaster(at::ScalarType compute_dtype, bool master_weights) {
  return SeparateMaster(static_cast<int64_t>(c10::elementSize(compute_dtype)), master_weights);
}
inline at::ScalarType GradChunkDtype(at::ScalarType compute_dtype, bool master_weights) {
  return GradElementBytes(static_cast<int64_t>(c10::elementSize(compute_dtype)), master_weights) == 4
             ? at::kFloat
             : compute_dtype;
}
using ChunkIds = std::array<int, kNumChunkKinds>;  // [kind] -> store id; -1: none (not owned)

// Where the start-up time went: allocating every payload, zeroing what no parameter's
// values cover (many threads), writing the initial values (parameters' own, or
// ChunkValues::initial on many threads).
struct StartupSeconds {
  double allocate_s = 0.0;
  double zero_s = 0.0;
  double initial_values_s = 0.0;
};

struct ChunkAllocation {
  const ChunkLayout& layout;
  const std::vector<std::vector<int64_t>>& shapes;  // [param]
  at::ScalarType compute_dtype = at::kFloat;
  bool grads_in_compute_chunks = false;
  const std::vector<bool>& optimizer_on_device;  // [chunk] (the tier plan's)
  const std::vector<bool>& owned;                // [chunk]
  at::ScalarType state_dtype = at::kFloat;       // Adam m and v: kFloat, kBFloat16 or kByte
  // [chunk] (the tier plan's; empty: none): its master (when separate), m and v are
  // entries without payload, marked and mounted by the NVMe tier (NvmeState), and its
  // values are written by WriteNvmeChunks.
  const std::vector<bool>& optimizer_on_nvme;
  bool master_weights = true;  // false: no fp32 master (SeparateMaster, GradChunkDtype)
};

// A parameter's values: `current(index)` (any device, its shape) copied into its slots,
// or, when `initial` is set, `initial(index, values)` writing them into `values` (fp32,
// contiguous, host, its shape, uninitialised; called on several threads at once;
// returns false to have them zeroed instead).
struct ChunkValues {
  std::function<at::Tensor(int index)> current;
  std::function<bool(int index, at::Tensor values)> initial;
};

// Chunk by chunk: its payloads added, its parameters' current values copied in (without
// `initial`), then `filled(chunk)`, where the caller may release the parameters' own
// storage: host memory then peaks near the chunks' bytes plus one chunk's parameters.
// Optimizer state placed on the device goes there directly. Returns [chunk] -> ids.
// A chunk whose separate master is on the NVMe tier gets no values and no `filled`
// here: WriteNvmeChunks does both.
std::vector<ChunkIds> AllocateChunks(ChunkStore& store, const ChunkAllocation& request, const ChunkValues& values,
                                     const std::function<void(int chunk)>& filled, StartupSeconds* seconds);

// After AllocateChunks, with `nvme` made over its NVMe entries: each NVMe chunk mounted
// (no read), m and v zeroed, the separate master written with its parameters' values
// (gaps zeroed) and their rounded copy put in the compute slots, written to the file;
// then `filled(chunk)` for those AllocateChunks left. Adds its time to initial_values_s.
void WriteNvmeChunks(ChunkStore& store, const ChunkAllocation& request, const std::vector<ChunkIds>& ids,
                     const ChunkValues& values, NvmeState& nvme, const std::function<void(int chunk)>& filled,
                     StartupSeconds* seconds);

}  // namespace ps::chunkmem
