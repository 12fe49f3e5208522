#include "tools/device_timing.h"

#include <algorithm>
#include <chrono>
#include <limits>

#ifdef PS_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace ps::tools {

void SynchronizeDevice() {
#ifdef PS_WITH_CUDA
  c10::cuda::device_synchronize();
#endif
}

double BestMs(int iters, const std::function<void()>& fn) {
  double best = std::numeric_limits<double>::infinity();
  for (int i = 0; i <= iters; ++i) {  // the first is a warm-up
    SynchronizeDevice();
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    SynchronizeDevice();
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (i > 0) best = std::min(best, ms);
  }
  return best;
}

}  // namespace ps::tools
