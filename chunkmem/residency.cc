#include "chunkmem/residency.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <chrono>
#include <limits>

namespace ps::chunkmem {

Residency::Residency(ChunkStore& store, std::vector<int> compute_ids, std::vector<bool> held,
                     const ResidencySettings& settings, const PlannedDeviceBytes& planned)
    : store_(store), ids_(std::move(compute_ids)), held_(std::move(held)), settings_(settings), planned_(planned) {
  if (held_.empty()) held_.assign(ids_.size(), true);
  TORCH_CHECK(held_.size() == ids_.size(), "chunkmem: residency of ", ids_.size(), " chunks given ", held_.size(),
              " held flags");
  in_use_.assign(ids_.size(), 0);
  pins_.assign(ids_.size(), 0);
  prefetched_.assign(ids_.size(), false);
}

bool Residency::on_device(int chunk) const { return held(chunk) && store_.tier(ids_[chunk]) == Tier::kDevice; }

void Residency::Unpin(int chunk) {
  TORCH_INTERNAL_ASSERT(pins_[chunk] > 0, "chunkmem: chunk ", chunk, " unpinned while not pinned");
  --pins_[chunk];
}

void Residency::NoteDeviceBytes() { interval_chunk_peak_ = std::max(interval_chunk_peak_, store_.BytesUsed(Tier::kDevice)); }

void Residency::CloseInterval() {
  if (!probe_) return;
  const int64_t non_model = probe_->TakePeakNonModelBytes();
  if (moment_ >= 0) {
    stats_.peak_non_model_bytes = std::max(stats_.peak_non_model_bytes, non_model);
    if (!warmed_up()) {
      if (static_cast<int>(non_model_peak_.size()) <= moment_) non_model_peak_.resize(moment_ + 1, 0);
      non_model_peak_[moment_] = std::max(non_model_peak_[moment_], non_model);
    } else if (traced_budget()) {
      stats_.peak_device_total_bytes = std::max(stats_.peak_device_total_bytes, interval_chunk_peak_ + non_model);
    }
  }
  interval_chunk_peak_ = store_.BytesUsed(Tier::kDevice);
}

int64_t Residency::ChunkBudgetNow() const {
  const int64_t cap = store_.Budget(Tier::kDevice);
  if (!traced_budget()) return cap;
  if (budget_at_.empty()) return WarmupShareBytes();
  // Paused (evaluation): moments do not advance, so no moment's budget applies; the
  // lowest one is safe for any block.
  if (paused_) return std::min(cap, min_budget_at_);
  const int t = std::clamp(moment_, 0, static_cast<int>(budget_at_.size()) - 1);
  return std::min(cap, budget_at_[t]);
}

int64_t Residency::WarmupShareBytes() const {
  return std::min(store_.Budget(Tier::kDevice), planned_.warmup_device_bytes);
}

int64_t Residency::MinChunkBudgetBytes() const {
  if (!traced_budget() || budget_at_.empty()) return ChunkBudgetNow();
  return std::min(store_.Budget(Tier::kDevice), min_budget_at_);
}

void Residency::BeginMoment(const char* what, int block) {
  if (paused_) return;
  CloseInterval();
  ++moment_;
  // Chunks still in use from an earlier moment (a tied parameter through backward) are
  // part of this moment's working set too.
  if (!warmed_up()) {
    for (int c = 0; c < num_chunks(); ++c) {
      if (in_use_[c] > 0) trace_.Record(c, moment_);
    }
  }
  // A moment whose budget is lower than the last one's: shrink to it now.
  if (!budget_at_.empty() && store_.BytesUsed(Tier::kDevice) > ChunkBudgetNow()) {
    if (!EvictOrGiveWay([&] { return EvictDownTo(ChunkBudgetNow(), /*keep=*/-1); })) ++stats_.budget_overruns;
    interval_chunk_peak_ = store_.BytesUsed(Tier::kDevice);  // the new interval starts after the shrink
  }
  if (timeline_) timeline_->Moment(std::string(what) + " " + std::to_string(block));
}

bool Residency::EvictOrGiveWay(const std::function<bool()>& evict) {
  return give_way_ ? give_way_(evict) : evict();
}

void Residency::MoveChunk(int chunk, Tier to, bool async) {
  TORCH_INTERNAL_ASSERT(!pinned(chunk), "chunkmem: chunk ", chunk, " moved while pinned (an optimizer update or a "
                        "collective reads it)");
  const int id = ids_[chunk];
  const int64_t start_us = timeline_ ? timeline_->NowUs() : 0;
  const auto start = std::chrono::steady_clock::now();
  if (async) {
    store_.MoveAsync(id, to);
  } else {
    store_.Move(id, to);
  }
  stats_.move_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (to == Tier::kDevice) {
    NoteDeviceBytes();
    ++stats_.fetches;
  } else {
    ++stats_.evictions;
  }
  if (timeline_) {
    timeline_->Copy(to == Tier::kDevice ? "fetch" : "evict", chunk, store_.chunk_bytes(id), start_us);
    timeline_->Bytes(store_.BytesUsed(Tier::kDevice), store_.BytesUsed(Tier::kHost));
  }
}

std::vector<EvictionCandidate> Residency::EvictableChunks(int keep, int64_t needed_until) const {
  std::vector<EvictionCandidate> out;
  for (int c = 0; c < num_chunks(); ++c) {
    if (c == keep || !on_device(c) || in_use_[c] > 0 || pinned(c)) continue;
    if (trace_.NextUse(c, moment_ - 1) <= needed_until) continue;
    out.push_back({c, chunk_bytes(c)});
  }
  return out;
}

bool Residency::FitsOnDevice(int64_t bytes, int64_t budget) const {
  return store_.BytesUsed(Tier::kDevice) + bytes <= budget && (bytes <= 0 || store_.CanHold(Tier::kDevice, bytes));
}

bool Residency::EvictDownTo(int64_t target_bytes, int keep, int64_t fit_bytes) {
  store_.ReleaseFinishedCopies();  // device payloads moved out whose copies are done: free them first
  auto done = [&] {
    return store_.BytesUsed(Tier::kDevice) <= target_bytes && (fit_bytes <= 0 || store_.CanHold(Tier::kDevice, fit_bytes));
  };
  if (done()) return true;
  const std::vector<EvictionCandidate> candidates = EvictableChunks(keep, std::numeric_limits<int64_t>::min());
  const EvictionPolicy& policy =
      belady_ ? static_cast<const EvictionPolicy&>(*belady_) : static_cast<const EvictionPolicy&>(lru_);
  // Ranked from just before this moment, so chunks used at this moment count as needed
  // soonest (NextUse looks strictly after the moment it is given); taken until the bytes
  // are under the target and (an arena) a free range of fit_bytes exists.
  for (int victim : policy.Choose(candidates, std::numeric_limits<int64_t>::max(), moment_ - 1)) {
    if (done()) break;
    MoveChunk(victim, Tier::kHost);
  }
  return done();
}

void Residency::FetchToDevice(int chunk) {
  if (on_device(chunk)) return;
  const int64_t need = chunk_bytes(chunk);
  const int64_t budget = ChunkBudgetNow();
  if (!EvictOrGiveWay([&] { return EvictDownTo(budget - need, chunk, need); })) {
    // With a traced budget the chunks in use get their room up to the store's budget:
    // during warm-up (the small warm-up share), and while paused (evaluation, whose
    // lowest-moment budget was traced for other chunks in use; an overrun). Otherwise
    // the chunks in use do not fit.
    const bool soft = traced_budget() && (budget_at_.empty() || paused_) && store_.CanHold(Tier::kDevice, need);
    if (!soft) FailNoRoom(chunk, need, budget);
    if (paused_ && !budget_at_.empty()) ++stats_.budget_overruns;
  }
  MoveChunk(chunk, Tier::kDevice);
}

void Residency::FailNoRoom(int chunk, int64_t need, int64_t budget) const {
  int64_t in_use_bytes = 0;
  std::string users;
  for (int c = 0; c < num_chunks(); ++c) {
    if (c == chunk || !on_device(c) || in_use_[c] == 0) continue;
    in_use_bytes += chunk_bytes(c);
    const std::string who = describe_users_ ? describe_users_(c) : "chunk " + std::to_string(c);
    users += (users.empty() ? "" : ", ") + who;
  }
  std::string traced;
  if (traced_budget() && !budget_at_.empty()) {
    const int t = std::clamp(moment_, 0, static_cast<int>(budget_at_.size()) - 1);
    traced = " (traced: device memory " + std::to_string(settings_.device_memory_bytes) + ", non-model peak " +
             std::to_string(non_model_peak_[t]) + " at moment " + std::to_string(t) + ")";
  }
  TORCH_CHECK(false, "chunkmem: chunk ", chunk, " (", need, " bytes) does not fit the device budget of ", budget,
              " bytes", traced, ": ", in_use_bytes, " bytes are held by chunks in use (by ", users,
              "); raise the device budget or lower chunk.size_elements");
}

void Residency::Acquire(int chunk) {
  if (prefetched_[chunk]) {
    prefetched_[chunk] = false;
    if (on_device(chunk)) ++stats_.prefetch_hits;
  }
  if (held(chunk)) FetchToDevice(chunk);
  if (!paused_ && !warmed_up()) trace_.Record(chunk, std::max(moment_, 0));
  lru_.Touch(chunk, ++tick_);
  ++in_use_[chunk];
}

void Residency::Release(int chunk) {
  TORCH_INTERNAL_ASSERT(in_use_[chunk] > 0, "chunkmem: chunk ", chunk, " released while not in use");
  --in_use_[chunk];
}

bool Residency::MakeRoomFor(int chunk, int64_t need, int64_t next_use_limit) {
  const int64_t budget = ChunkBudgetNow();
  if (FitsOnDevice(need, budget)) return true;
  // Only chunks needed later than the prefetched one may make room for it.
  const std::vector<EvictionCandidate> candidates = EvictableChunks(chunk, next_use_limit);
  int64_t freeable = 0;
  for (const auto& cand : candidates) freeable += cand.bytes;
  const int64_t deficit = store_.BytesUsed(Tier::kDevice) + need - budget;
  if (freeable < deficit) return false;
  for (int victim : belady_->Choose(candidates, deficit, moment_ - 1)) MoveChunk(victim, Tier::kHost);
  return store_.CanHold(Tier::kDevice, need);  // an arena may still lack a large enough range
}

void Residency::Prefetch() {
  if (!prefetching()) return;
  const int total = trace_.total_moments();
  for (int d = 1; d <= settings_.prefetch_depth && d < total; ++d) {
    for (int c : trace_.ChunksAt((moment_ + d) % total)) {
      if (!held(c) || pinned(c) || on_device(c)) continue;  // ZeRO: not held chunks are gathered, not fetched
      if (!MakeRoomFor(c, chunk_bytes(c), trace_.NextUse(c, moment_))) return;
      MoveChunk(c, Tier::kDevice, /*async=*/true);  // waited for at its first use
      prefetched_[c] = true;
      ++stats_.prefetches;
    }
  }
}

void Residency::EndIteration() {
  CloseInterval();  // the last moment's interval includes the optimizer step
  ++stats_.iterations;
  stats_.moments_per_iteration = moment_ + 1;
  FinishWarmupIfDone();
  moment_ = -1;
}

void Residency::FinishWarmupIfDone() {
  if (!warmed_up()) return;
  const int moments = stats_.moments_per_iteration;
  if (traced_budget() && budget_at_.empty()) {
    non_model_peak_.resize(moments, 0);
    for (int t = 0; t < moments; ++t) {
      const int64_t budget = settings_.device_memory_bytes - non_model_peak_[t];
      // The pinned optimizer state and the chunks this moment uses must be there; the
      // last moment's budget holds through the optimizer step, which takes the device
      // update's scratch.
      int64_t needed = planned_.device_optimizer_bytes + (t == moments - 1 ? planned_.device_scratch_bytes : 0);
      for (int c : trace_.ChunksAt(t)) needed += chunk_bytes(c);
      int64_t b = settings_.static_budgets ? std::min(budget, std::max(WarmupShareBytes(), needed)) : budget;
      if (b < needed) {
        // The activations measured more than the tier plan assumed: the chunks
        // in use still get their room, up to the store's hard budget, and it is an overrun.
        b = needed;
        ++stats_.budget_overruns;
      }
      budget_at_.push_back(b);
    }
    if (!budget_at_.empty()) min_budget_at_ = *std::min_element(budget_at_.begin(), budget_at_.end());
  }
  if (!belady_ && settings_.eviction == EvictionPolicyKind::kOpt) {
    trace_.set_total_moments(moments);
    belady_ = std::make_unique<BeladyPolicy>(trace_);
  }
}

WarmupState Residency::SaveWarmup() const {
  WarmupState s;
  s.iterations = stats_.iterations;
  s.total_moments = stats_.moments_per_iteration;
  s.chunk_moments = trace_.chunk_moments();
  s.chunk_moments.resize(num_chunks());
  s.non_model_peak_bytes = non_model_peak_;
  return s;
}

void Residency::RestoreWarmup(const WarmupState& s) {
  TORCH_CHECK(stats_.iterations == 0 && moment_ == -1, "chunkmem: RestoreWarmup after training started");
  TORCH_CHECK(static_cast<int>(s.chunk_moments.size()) == num_chunks(), "chunkmem: the saved warm-up trace has ",
              s.chunk_moments.size(), " chunks, this layout ", num_chunks());
  trace_ = AccessTrace();
  for (int c = 0; c < num_chunks(); ++c) {
    for (int t : s.chunk_moments[c]) {
      TORCH_CHECK(t >= 0 && (s.total_moments == 0 || t < s.total_moments), "chunkmem: saved warm-up moment ", t,
                  " of chunk ", c, " is out of range");
      trace_.Record(c, t);
    }
  }
  non_model_peak_ = s.non_model_peak_bytes;
  stats_.iterations = s.iterations;
  stats_.moments_per_iteration = s.total_moments;
  if (warmed_up()) TORCH_CHECK(s.total_moments > 0, "chunkmem: a finished warm-up without moments");
  FinishWarmupIfDone();
}

void Residency::Place(int chunk, Tier tier, bool async) {
  TORCH_CHECK(in_use_[chunk] == 0, "chunkmem: chunk ", chunk, " has parameters in use; it cannot move now");
  if (store_.tier(ids_[chunk]) == tier) return;
  if (tier == Tier::kDevice) {
    FetchToDevice(chunk);
  } else {
    MoveChunk(chunk, Tier::kHost, async);
  }
}

bool Residency::ReturnToDeviceIfRoom(int chunk, bool async) {
  TORCH_CHECK(in_use_[chunk] == 0, "chunkmem: chunk ", chunk, " has parameters in use; it cannot move now");
  if (on_device(chunk)) return true;
  if (!FitsOnDevice(chunk_bytes(chunk), ChunkBudgetNow())) return false;
  MoveChunk(chunk, Tier::kDevice, async);
  return true;
}

int64_t Residency::PeakWorkingSetBytes() const {
  const int total = trace_.total_moments();
  int64_t peak = 0;
  for (int t = 0; t < total; ++t) {
    std::vector<bool> seen(num_chunks(), false);
    int64_t bytes = 0;
    for (int d = 0; d <= std::max<int64_t>(0, settings_.prefetch_depth) && d < total; ++d) {
      for (int c : trace_.ChunksAt((t + d) % total)) {
        if (seen[c]) continue;
        seen[c] = true;
        bytes += chunk_bytes(c);
      }
    }
    peak = std::max(peak, bytes);
  }
  return peak;
}

}  // namespace ps::chunkmem
