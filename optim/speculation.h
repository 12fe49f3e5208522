// Speculation: host chunk updates made ahead of the optimizer step, during the last
// backward, and kept or rolled back when the step knows the real clip coefficient and
// overflow flag (docs/optim.md, "The overlapped host step").
//
// Owns the backup slots (fp32 master, m and v in their state dtype and, in bf16/fp16,
// the compute chunk: 14 bytes per element of the largest chunk with fp32 moments,
// borrowed once at construction), the worker
// thread that runs the speculated updates in order while backward goes on, the records
// of this step's speculated chunks with their sums of squares, the rollback (payloads
// restored from their slot) and the back-off after a rollback. It knows payloads and
// kernel work, not chunks' homes: the optimizer resolves on the training thread what the
// update reads and writes (Update, Work) and holds the chunk in place meanwhile.
// Start, Wait and Finish: the training thread (or the backward thread, never at once);
// the queued jobs run on the worker.
#pragma once

#include <ATen/core/Tensor.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "chunkmem/copy_engine.h"
#include "chunkmem/host_pipeline.h"
#include "optim/cpu_adam.h"

namespace ps::optim {

struct SpeculationOptions {
  int slots = 0;          // backup slots; 0 = speculation off
  int backoff_steps = 0;  // steps that do not speculate after one that rolled back
  int64_t slot_numel = 0;  // a slot's elements: the largest chunk's capacity
  // A compute chunk separate from the master (not fp32): slots also back up the compute
  // chunk; kFloat: none (the master is the compute chunk).
  at::ScalarType compute_dtype = at::kFloat;
  // The weights the update writes: the fp32 master, or bf16 weights without one.
  at::ScalarType master_dtype = at::kFloat;
  at::ScalarType state_dtype = at::kFloat;    // m and v (optimizer.state_dtype)
  int64_t state_slot_numel = 0;  // a slot's m and v elements: the largest chunk's state payload
  CpuAdamKernels kernels;  // the worker's sums of squares and updates
  int threads = 1;
  // Borrows a host buffer for the run (the plan reserves the slots).
  std::function<at::Tensor(int64_t numel, at::ScalarType dtype)> borrow_host;
};

class Speculation {
 public:
  // One chunk's update ahead, resolved on the training thread.
  struct Update {
    int chunk = -1;
    // The payloads the update writes, in the slot's order: fp32 master (the compute
    // chunk in fp32), m, v, then the compute chunk when it is not the master and not
    // staged. Backed up by the worker before the update.
    std::vector<at::Tensor> payloads;
    // The new parameters go to the slot's staging part instead of the compute chunk
    // (which only receives them, on the device): kept, they are copied in by the caller.
    bool staged = false;
    // The chunk's sum of squares: the per-tensor reductions queued on the device
    // (gradients there), else taken on the worker from these host spans first.
    std::vector<at::Tensor> device_sums;
    std::vector<GradSpan> host_sum_spans;
    // The chunk's copy to the host, waited for by the worker first (null: none).
    std::shared_ptr<chunkmem::CopyTicket> copy;
  };
  // The kernel work of an update and the compute-chunk ranges it writes; `staging`
  // (null unless staged) receives the new parameters.
  struct Work {
    std::vector<AdamWork> work;
    std::vector<chunkmem::ElementRange> written;
  };
  using MakeWork = std::function<Work(const at::Tensor* staging)>;
  // A speculated chunk, as Finish reports it.
  struct Record {
    int chunk = -1;
    bool staged = false;
    std::vector<chunkmem::ElementRange> written;
    const at::Tensor* staging = nullptr;  // staged: the new parameters, at their chunk offsets
  };

  explicit Speculation(SpeculationOptions options);
  ~Speculation();  // waits for the queued jobs
  Speculation(const Speculation&) = delete;
  Speculation& operator=(const Speculation&) = delete;

  // The step's last backward begins: on unless there are no slots or it backs off.
  void Begin(double lr, double loss_scale);
  double lr() const { return lr_; }
  double loss_scale() const { return loss_scale_; }
  // On, `chunk` not speculated yet this step, and a slot free.
  bool CanTake(int chunk) const;
  // Takes a slot and queues on the worker: wait for u.copy, back up u.payloads, the
  // host sum of squares, then make_work's update (called here, at once: it may advance
  // step counters; the caller keeps the payloads in place until Finish). Payloads that
  // do not fit the slot throw before make_work is called, and leave the slot free.
  void Start(Update u, const MakeWork& make_work);
  // Waits for every queued job; rethrows the first failure.
  void Wait();
  // The sum of squares taken for `chunk` this step, if speculated: the device sums
  // appended to `device_sums`, or the host sum added to `host_sum`. After Wait.
  bool AddSumSquares(int chunk, double& host_sum, std::vector<at::Tensor>& device_sums) const;
  // Ends the step, after Wait: each speculated chunk is kept (`stands`: on_kept) or its
  // payloads restored from its slot (then on_rolled_back, in order of speculation); the
  // slots are free again, and a rollback starts the back-off. Returns the rolled back count.
  int Finish(bool stands, const std::function<void(const Record&)>& on_kept,
             const std::function<void(const Record&)>& on_rolled_back);
  int num_slots() const { return static_cast<int>(slots_.size()); }

 private:
  struct Slot {
    at::Tensor master, m, v;  // master: slot_numel fp32; m, v: state_slot_numel of state_dtype
    at::Tensor compute;       // compute dtype (not fp32 only): its backup, or the staged parameters
    double sum_squares = 0.0;  // the worker's host sum (this slot's job alone until Finish)
  };
  struct Entry {
    Record record;
    int slot = -1;
    std::vector<at::Tensor> payloads;
    std::vector<at::Tensor> device_sums;
  };
  // (slot part, payload) pairs of an update's payloads.
  std::vector<std::pair<at::Tensor, at::Tensor>> BackupPairs(const Slot& slot,
                                                             const std::vector<at::Tensor>& payloads) const;
  void RunOnWorker(std::function<void()> job);

  SpeculationOptions options_;
  bool on_ = false;
  int backoff_left_ = 0;
  double lr_ = 0.0, loss_scale_ = 1.0;
  std::vector<Slot> slots_;  // never grows after construction: jobs keep pointers into it
  std::vector<bool> slot_used_;
  std::vector<Entry> entries_;  // this step's, in the order they were made
  std::thread worker_;          // started with the first job
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  int running_ = 0;  // jobs taken, not finished
  bool stop_ = false;
  std::exception_ptr failure_;
};

}  // namespace ps::optim
