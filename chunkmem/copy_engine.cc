#include "chunkmem/copy_engine.h"

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#ifdef PS_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace ps::chunkmem {
namespace {

class ThreadTicket final : public CopyTicket {
 public:
  ThreadTicket(at::Tensor dst, at::Tensor src) : dst_(std::move(dst)), src_(std::move(src)) {}
  void Run() {
    std::exception_ptr error;
    try {
      dst_.copy_(src_);
    } catch (...) {
      error = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(mu_);
    error_ = error;
    done_ = true;
    src_ = at::Tensor();
    dst_ = at::Tensor();
    cv_.notify_all();
  }
  void Wait() override {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return done_; });
    if (error_) std::rethrow_exception(error_);
  }

 private:
  at::Tensor dst_, src_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
};

class ThreadCopyEngine final : public CopyEngine {
 public:
  explicit ThreadCopyEngine(std::function<void()> before_copy)
      : before_copy_(std::move(before_copy)), worker_([this] { Loop(); }) {}
  ~ThreadCopyEngine() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }
  std::shared_ptr<CopyTicket> Start(at::Tensor dst, at::Tensor src) override {
    auto ticket = std::make_shared<ThreadTicket>(std::move(dst), std::move(src));
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(ticket);
    }
    cv_.notify_all();
    return ticket;
  }

 private:
  void Loop() {
    for (;;) {
      std::shared_ptr<ThreadTicket> next;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stop requested and nothing left
        next = queue_.front();
        queue_.pop_front();
      }
      if (before_copy_) before_copy_();
      next->Run();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<ThreadTicket>> queue_;
  bool stop_ = false;
  const std::function<void()> before_copy_;  // test seam (MakeThreadCopyEngine)
  std::thread worker_;  // last: starts after the members above exist
};

#ifdef PS_WITH_CUDA
class CudaTicket final : public CopyTicket {
 public:
  CudaTicket(at::Tensor dst, at::Tensor src, std::shared_ptr<at::cuda::CUDAEvent> done, c10::DeviceIndex device)
      : dst_(std::move(dst)), src_(std::move(src)), done_(std::move(done)), device_(device) {}
  // A ticket dropped unwaited (an exception on the way) still may not free its tensors
  // while the copy reads or writes them.
  ~CudaTicket() override {
    if (src_.defined()) Wait();
  }
  void Wait() override {
    std::lock_guard<std::mutex> lock(mu_);
    c10::cuda::CUDAGuard guard(device_);  // any thread may wait (the speculation worker does)
    done_->synchronize();  // the copy is complete: dst is ready, src may be freed
    src_ = at::Tensor();
    dst_ = at::Tensor();
  }
  void ReleaseIfDone() override {
    std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
    if (!lock.owns_lock() || !src_.defined()) return;  // a waiter has it: it lets go itself
    c10::cuda::CUDAGuard guard(device_);
    if (done_->query()) src_ = at::Tensor();
  }

 private:
  std::mutex mu_;
  at::Tensor dst_, src_;
  std::shared_ptr<at::cuda::CUDAEvent> done_;
  c10::DeviceIndex device_;
};

class CudaCopyEngine final : public CopyEngine {
 public:
  explicit CudaCopyEngine(at::Device device)
      : device_(device.has_index() ? device.index() : c10::cuda::current_device()),
        stream_(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device_)) {}
  std::shared_ptr<CopyTicket> Start(at::Tensor dst, at::Tensor src) override {
    c10::cuda::CUDAGuard guard(device_);
    // Ordered after everything already queued on the compute stream (which may still
    // be writing `src`, e.g. gradients in a compute chunk).
    at::cuda::CUDAEvent queued;
    queued.record(c10::cuda::getCurrentCUDAStream(device_));
    queued.block(stream_);
    {
      c10::cuda::CUDAStreamGuard on_copy_stream(stream_);
      dst.copy_(src, /*non_blocking=*/true);  // host payloads are pinned in CUDA runs
    }
    auto done = std::make_shared<at::cuda::CUDAEvent>();
    done->record(stream_);
    return std::make_shared<CudaTicket>(std::move(dst), std::move(src), std::move(done), device_);
  }

 private:
  c10::DeviceIndex device_;
  c10::cuda::CUDAStream stream_;
};
#endif

}  // namespace

std::unique_ptr<CopyEngine> MakeThreadCopyEngine(std::function<void()> before_copy) {
  return std::make_unique<ThreadCopyEngine>(std::move(before_copy));
}

std::unique_ptr<CopyEngine> MakeCudaCopyEngine(at::Device device) {
#ifdef PS_WITH_CUDA
  TORCH_CHECK(device.is_cuda(), "chunkmem: CUDA copy engine needs a CUDA device, got ", device);
  return std::make_unique<CudaCopyEngine>(device);
#else
  TORCH_CHECK(false, "chunkmem: this build has no CUDA (build with --config=cuda) for device ", device);
#endif
}

}  // namespace ps::chunkmem
