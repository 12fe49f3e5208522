// Residency: where each compute chunk is (device or host tier), and the only code that
// moves one (docs/chunkmem.md, "Residency").
//
// It keeps the moment clock (one moment per layer-hook event), the warm-up access trace,
// the device budget of each moment (the store's, or with a traced budget the warm-up
// share and afterwards what each moment's traced activations leave), the eviction order
// (LRU during warm-up, Belady from the trace after it), prefetch of the next moments'
// chunks, and two kinds of marks: chunks in use (Acquire/Release: never evicted) and
// pinned chunks (Pin/Unpin: an optimizer update or a collective reads them; never
// evicted, prefetched or moved).
//
// Invariants (tested in tests/chunkmem/residency_test.cc against scripted traces):
// - a chunk in use is on the device, and no chunk in use or pinned is evicted;
// - an eviction or a fetch only happens here (MoveChunk), counted and timelined;
// - after warm-up, the device chunk bytes at a moment stay within the moment's budget
//   unless the chunks in use alone exceed it (counted in budget_overruns; while paused
//   the budget is the lowest moment's, and the chunks in use may exceed it too, up to
//   the store's budget);
// - a prefetch only evicts chunks needed later than the chunk it brings.
// Single-threaded: the training thread and the backward thread, which never overlap.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "chunkmem/chunk_config.h"
#include "chunkmem/chunk_store.h"
#include "chunkmem/eviction.h"
#include "chunkmem/memory_probe.h"
#include "chunkmem/timeline.h"

namespace ps::chunkmem {

// What the warm-up iterations learned (plain data, saved in checkpoints): with it a
// resumed run budgets, evicts and prefetches as the run that saved it did, and needs no
// new warm-up. Only valid for the same layout (chunk count and sizes).
struct WarmupState {
  int64_t iterations = 0;                       // iterations traced so far
  int total_moments = 0;                        // moments per iteration (0 before the first ended)
  std::vector<std::vector<int>> chunk_moments;  // [chunk] -> moments it was accessed at
  std::vector<int64_t> non_model_peak_bytes;    // [moment] traced non-model peaks
};

// The residency's settings (ChunkConfig's keys of the same names).
struct ResidencySettings {
  EvictionPolicyKind eviction = EvictionPolicyKind::kOpt;
  int64_t warmup_steps = 1;  // iterations traced before Belady and the per-moment budgets apply
  // After warm-up, the chunks of the next `prefetch_depth` moments are brought to the
  // device ahead of use. 0 = off.
  int64_t prefetch_depth = 1;
  // Traced budget: chunks plus non-model memory (the probe's) must fit this many device
  // bytes. 0 = the store's device budget, fixed.
  int64_t device_memory_bytes = 0;
  // With a traced budget (chunk.placement: static): each moment's budget is the warm-up
  // share (raised to what the moment's chunks need) capped by what its activations
  // leave, instead of all they leave.
  bool static_budgets = false;
};

// From the run's TierPlan (tier_plan.h): the device bytes allowed during a traced
// warm-up (pinned optimizer state included), the optimizer state on the device for good,
// and the optimizer's device-update scratch, taken at the step, after the last moment of
// an iteration (chunkmem/update_scratch.h).
struct PlannedDeviceBytes {
  int64_t warmup_device_bytes = 0;
  int64_t device_optimizer_bytes = 0;
  int64_t device_scratch_bytes = 0;
};

struct ResidencyStats {
  int64_t evictions = 0;        // compute chunks moved device -> host to make room
  int64_t fetches = 0;          // compute chunks moved host -> device (prefetches included)
  int64_t prefetches = 0;       // fetches made ahead of use from the trace
  int64_t prefetch_hits = 0;    // accesses that found their chunk already prefetched
  int64_t iterations = 0;
  int moments_per_iteration = 0;
  int64_t peak_non_model_bytes = 0;     // highest non-model bytes seen by the probe
  // After warm-up, with a probe: the most (device chunk bytes + non-model bytes) in any
  // moment's interval (both peaks of the interval added: an upper bound).
  int64_t peak_device_total_bytes = 0;
  int64_t budget_overruns = 0;          // moments (or paused fetches) whose traced budget chunks in use exceeded
  double move_ms = 0;                   // training-thread time in chunk moves (async: submitting), cumulative
};

class Residency {
 public:
  // compute_ids[c]: the store id of layout chunk c's compute entry. held[c] (empty: all
  // held): whether this rank holds its payload; a chunk it does not (ZeRO) is traced and
  // counted in the working set by its entry's bytes, never moved. Payloads start where
  // the store has them. `store` outlives this.
  Residency(ChunkStore& store, std::vector<int> compute_ids, std::vector<bool> held, const ResidencySettings& settings,
            const PlannedDeviceBytes& planned = {});

  // The clock. BeginMoment starts the next moment (not while paused): during warm-up
  // the chunks still in use join its trace; after it, the device shrinks to the
  // moment's budget if that is lower. EndIteration closes the last moment, counts the
  // iteration and, once the warm-up iterations are done, derives the per-moment budgets
  // and switches to Belady eviction.
  void BeginMoment(const char* what, int block);
  void EndIteration();

  // Chunk `chunk` is used from now on (nested uses count): fetched to the device if it
  // is held and not there (evicting as needed; c10::Error naming the chunks in use when
  // they alone exceed the budget), traced during warm-up.
  void Acquire(int chunk);
  void Release(int chunk);
  int in_use(int chunk) const { return in_use_[chunk]; }
  // Chunk `chunk` (held) to the device now, evicting as for an access; it need not be in use.
  void Fetch(int chunk) { FetchToDevice(chunk); }
  // After warm-up (Belady), not paused, prefetch_depth > 0: Prefetch brings chunks ahead.
  bool prefetching() const { return belady_ && !paused_ && settings_.prefetch_depth > 0; }
  // After warm-up: the next moments' chunks, fetched asynchronously as far as the
  // budget allows by evicting only chunks needed later than them.
  void Prefetch();
  void Pin(int chunk) { ++pins_[chunk]; }
  void Unpin(int chunk);
  bool pinned(int chunk) const { return pins_[chunk] > 0; }

  // Moves for a chunk not in use (the optimizer's, between backward and the next
  // forward). To the device evicting as for an access; to the host `async` on the copy
  // engine. No-op when it is there.
  void Place(int chunk, Tier tier, bool async = false);
  // To the device only if it fits the budget now without evicting; whether it is there.
  bool ReturnToDeviceIfRoom(int chunk, bool async = false);
  // Evicts chunks neither in use, pinned nor `keep` (policy order) until the device holds
  // at most `target_bytes` and (`fit_bytes` > 0) can place that many more. Whether it
  // got there.
  bool EvictDownTo(int64_t target_bytes, int keep, int64_t fit_bytes = 0);
  // EvictDownTo(budget now - bytes) so that `bytes` more fit.
  bool FreeDeviceBytes(int64_t bytes) { return EvictDownTo(ChunkBudgetNow() - bytes, /*keep=*/-1, bytes); }
  // The device can take `bytes` more without evicting (an arena: in one free range)
  // and stay within `budget`.
  bool FitsOnDevice(int64_t bytes, int64_t budget) const;
  // Another part borrowed device bytes (a gradient staging slot, a gathered group):
  // they count toward this moment's peak.
  void NoteDeviceBytes();

  // Chunk bytes the device may hold now: the store's budget, or with a traced budget the
  // warm-up share or this moment's budget (paused: the lowest moment's).
  int64_t ChunkBudgetNow() const;
  // The lowest chunk budget over all moments (what stays on the device for good must fit it).
  int64_t MinChunkBudgetBytes() const;
  // From the trace: the most compute-chunk bytes needed on the device together (one
  // moment's chunks plus those of the next prefetch_depth moments).
  int64_t PeakWorkingSetBytes() const;

  bool warmed_up() const { return stats_.iterations >= settings_.warmup_steps; }
  const AccessTrace& trace() const { return trace_; }
  int moment() const { return moment_; }
  WarmupState SaveWarmup() const;
  // Before the first iteration, same layout; c10::Error naming the mismatch otherwise.
  void RestoreWarmup(const WarmupState& state);

  // While paused (evaluation), moments do not advance and accesses are not traced.
  void set_paused(bool paused) { paused_ = paused; }
  bool paused() const { return paused_; }
  void set_probe(DeviceMemoryProbe* probe) { probe_ = probe; }     // not owned; null = none
  void set_timeline(ChunkTimeline* timeline) { timeline_ = timeline; }  // not owned; null = none
  // When eviction alone cannot make room: `give_way(evict)` may release other device
  // bytes (gradient staging slots) and retry `evict`; returns whether it succeeded.
  void set_give_way(std::function<bool(const std::function<bool()>& evict)> give_way) { give_way_ = std::move(give_way); }
  // Names the users of a chunk in use, for the error when the chunks in use do not fit.
  void set_describe_users(std::function<std::string(int chunk)> describe) { describe_users_ = std::move(describe); }
  const ResidencyStats& stats() const { return stats_; }
  bool on_device(int chunk) const;
  int64_t chunk_bytes(int chunk) const { return store_.chunk_bytes(ids_[chunk]); }  // its compute entry's
  int num_chunks() const { return static_cast<int>(ids_.size()); }

 private:
  bool held(int chunk) const { return held_[chunk]; }
  bool traced_budget() const { return settings_.device_memory_bytes > 0; }
  int64_t WarmupShareBytes() const;
  void MoveChunk(int chunk, Tier to, bool async = false);
  void FetchToDevice(int chunk);
  [[noreturn]] void FailNoRoom(int chunk, int64_t need, int64_t budget) const;
  bool EvictOrGiveWay(const std::function<bool()>& evict);
  bool MakeRoomFor(int chunk, int64_t need, int64_t next_use_limit);
  // Held device chunks neither in use, pinned nor `keep`, whose next use (after this
  // moment) is later than `needed_until`.
  std::vector<EvictionCandidate> EvictableChunks(int keep, int64_t needed_until) const;
  void CloseInterval();
  void FinishWarmupIfDone();

  ChunkStore& store_;
  std::vector<int> ids_;     // [chunk] compute entry's store id
  std::vector<bool> held_;  // [chunk] this rank holds the payload
  ResidencySettings settings_;
  PlannedDeviceBytes planned_;
  std::vector<int> in_use_;       // [chunk]
  std::vector<int> pins_;         // [chunk]
  std::vector<bool> prefetched_;  // [chunk] fetched ahead and not used yet
  AccessTrace trace_;
  LruPolicy lru_;
  std::unique_ptr<BeladyPolicy> belady_;
  int moment_ = -1;
  int64_t tick_ = 0;
  bool paused_ = false;
  ResidencyStats stats_;
  DeviceMemoryProbe* probe_ = nullptr;
  ChunkTimeline* timeline_ = nullptr;
  std::function<bool(const std::function<bool()>&)> give_way_;
  std::function<std::string(int)> describe_users_;
  std::vector<int64_t> non_model_peak_;  // [moment] traced in warm-up
  std::vector<int64_t> budget_at_;       // [moment] chunk budget after warm-up
  int64_t min_budget_at_ = 0;            // the lowest of budget_at_
  int64_t interval_chunk_peak_ = 0;      // device chunk bytes peak since the last moment
};

}  // namespace ps::chunkmem
