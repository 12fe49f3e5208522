// CopyEngine: chunk copies that run while the training thread computes (prefetch).
//
// Start() begins copying `src` into `dst` and returns at once; Wait() returns when the
// copy is complete and `dst` may be read or written by anyone. The engine keeps both
// tensors alive until then. CPU engine (the simulated device tier): one worker thread
// copying in submission order. CUDA engine: a side stream, ordered after the work
// already queued on the compute stream; Wait() blocks the host on the copy's event
// (cheap when the copy finished long ago, which is the point of prefetching).
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>

namespace ps::chunkmem {

class CopyTicket {
 public:
  virtual ~CopyTicket() = default;
  virtual void Wait() = 0;
  // Without blocking: if the copy has finished, drops the engine's hold on the source,
  // so its memory (a device payload the store already counts as gone) is free before
  // anyone waits. Safe beside a Wait on another thread.
  virtual void ReleaseIfDone() {}
};

class CopyEngine {
 public:
  virtual ~CopyEngine() = default;
  virtual std::shared_ptr<CopyTicket> Start(at::Tensor dst, at::Tensor src) = 0;
};

// A worker thread; the destructor finishes queued copies first. Test seam:
// `before_copy`, when given, runs on the worker just before each copy; a test blocks in
// it to hold copies back while it drops its own references to their tensors.
std::unique_ptr<CopyEngine> MakeThreadCopyEngine(std::function<void()> before_copy = nullptr);
// A CUDA side stream on `device`; throws without a CUDA build.
std::unique_ptr<CopyEngine> MakeCudaCopyEngine(at::Device device);

}  // namespace ps::chunkmem
