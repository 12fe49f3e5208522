#include "optim/speculation.h"

#include <ATen/core/grad_mode.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstring>
#include <utility>

namespace ps::optim {

Speculation::Speculation(SpeculationOptions options) : options_(std::move(options)) {
  slots_.resize(std::max(0, options_.slots));
  slot_used_.assign(slots_.size(), false);
  for (Slot& slot : slots_) {
    slot.master = options_.borrow_host(options_.slot_numel, options_.master_dtype);
    slot.m = options_.borrow_host(options_.state_slot_numel, options_.state_dtype);
    slot.v = options_.borrow_host(options_.state_slot_numel, options_.state_dtype);
    if (options_.compute_dtype != at::kFloat) slot.compute = options_.borrow_host(options_.slot_numel, options_.compute_dtype);
  }
}

Speculation::~Speculation() {
  if (!worker_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

void Speculation::RunOnWorker(std::function<void()> job) {
  if (!worker_.joinable()) {
    worker_ = std::thread([this] {
      std::unique_lock<std::mutex> lock(mu_);
      for (;;) {
        cv_.wait(lock, [this] { return stop_ || !jobs_.empty(); });
        if (jobs_.empty()) return;
        std::function<void()> next = std::move(jobs_.front());
        jobs_.pop_front();
        ++running_;
        lock.unlock();
        try {
          next();
        } catch (...) {
          std::lock_guard<std::mutex> relock(mu_);
          if (!failure_) failure_ = std::current_exception();
        }
        lock.lock();
        --running_;
        cv_.notify_all();
      }
    });
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_.push_back(std::move(job));
  }
  cv_.notify_all();
}

void Speculation::Wait() {
  if (!worker_.joinable()) return;
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return jobs_.empty() && running_ == 0; });
  if (failure_) {
    std::exception_ptr e = failure_;
    failure_ = nullptr;
    std::rethrow_exception(e);
  }
}

void Speculation::Begin(double lr, double loss_scale) {
  TORCH_INTERNAL_ASSERT(entries_.empty(), "Speculation: Begin twice in one step");
  on_ = !slots_.empty() && backoff_left_ == 0;
  if (backoff_left_ > 0) --backoff_left_;
  lr_ = lr;
  loss_scale_ = loss_scale;
}

bool Speculation::CanTake(int chunk) const {
  if (!on_) return false;
  for (const Entry& e : entries_) {
    if (e.record.chunk == chunk) return false;  // once per step
  }
  return std::find(slot_used_.begin(), slot_used_.end(), false) != slot_used_.end();
}

std::vector<std::pair<at::Tensor, at::Tensor>> Speculation::BackupPairs(const Slot& slot,
                                                                        const std::vector<at::Tensor>& payloads) const {
  const at::Tensor* parts[] = {&slot.master, &slot.m, &slot.v, &slot.compute};
  TORCH_INTERNAL_ASSERT(payloads.size() <= 4, "Speculation: more payloads than slot parts");
  std::vector<std::pair<at::Tensor, at::Tensor>> pairs;
  for (size_t k = 0; k < payloads.size(); ++k) {
    const at::Tensor& part = *parts[k];
    const at::Tensor& payload = payloads[k];
    TORCH_INTERNAL_ASSERT(part.defined() && part.numel() >= payload.numel() && part.scalar_type() == payload.scalar_type(),
                          "Speculation: slot too small");
    pairs.emplace_back(part.narrow(0, 0, payload.numel()), payload);
  }
  return pairs;
}

void Speculation::Start(Update u, const MakeWork& make_work) {
  TORCH_INTERNAL_ASSERT(CanTake(u.chunk), "Speculation: chunk ", u.chunk, " cannot be taken now");
  const auto free = std::find(slot_used_.begin(), slot_used_.end(), false);
  const int slot_index = static_cast<int>(free - slot_used_.begin());
  Slot& slot = slots_[slot_index];
  TORCH_INTERNAL_ASSERT(!u.staged || slot.compute.defined(), "Speculation: staged without a compute part");
  // The backup is checked before make_work runs: make_work has effects (the caller's
  // step counts advance, undone only for a recorded entry), so nothing may fail after
  // it before the entry is recorded.
  std::vector<std::pair<at::Tensor, at::Tensor>> backup = BackupPairs(slot, u.payloads);
  // A non-finite gradient is updated too: the step then skips, and the rollback
  // restores what the update wrote.
  Work w = make_work(u.staged ? &slot.compute : nullptr);
  slot_used_[slot_index] = true;
  Entry e;
  e.record = {u.chunk, u.staged, std::move(w.written), u.staged ? &slot.compute : nullptr};
  e.slot = slot_index;
  e.payloads = std::move(u.payloads);
  e.device_sums = std::move(u.device_sums);
  entries_.push_back(std::move(e));
  slot.sum_squares = 0.0;
  double* sum_squares = &slot.sum_squares;  // slots_ never grows after construction
  RunOnWorker([copy = std::move(u.copy), backup = std::move(backup), sum_spans = std::move(u.host_sum_spans),
               work = std::move(w.work), sum_squares, kernels = options_.kernels, threads = options_.threads] {
    at::NoGradGuard no_grad;
    if (copy) copy->Wait();
    for (const auto& [to, from] : backup) std::memcpy(to.data_ptr(), from.data_ptr(), from.nbytes());
    if (!sum_spans.empty()) *sum_squares = ParallelSumSquares(kernels, sum_spans, threads);
    ParallelAdam(kernels, work, threads);
  });
}

bool Speculation::AddSumSquares(int chunk, double& host_sum, std::vector<at::Tensor>& device_sums) const {
  for (const Entry& e : entries_) {
    if (e.record.chunk != chunk) continue;
    if (e.device_sums.empty()) {
      host_sum += slots_[e.slot].sum_squares;
    } else {
      device_sums.insert(device_sums.end(), e.device_sums.begin(), e.device_sums.end());
    }
    return true;
  }
  return false;
}

int Speculation::Finish(bool stands, const std::function<void(const Record&)>& on_kept,
                        const std::function<void(const Record&)>& on_rolled_back) {
  int rolled_back = 0;
  for (const Entry& e : entries_) {
    if (stands) {
      on_kept(e.record);
      continue;
    }
    for (const auto& [part, payload] : BackupPairs(slots_[e.slot], e.payloads)) payload.copy_(part);
    on_rolled_back(e.record);
    ++rolled_back;
  }
  if (rolled_back > 0) backoff_left_ = options_.backoff_steps;
  entries_.clear();
  std::fill(slot_used_.begin(), slot_used_.end(), false);
  on_ = false;
  return rolled_back;
}

}  // namespace ps::optim
