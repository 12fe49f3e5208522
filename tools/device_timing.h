// Timing for the device benchmarks (tools/bench_device_*.cc): the best of repeated runs of
// some work, the compute device synchronised before and after each (CUDA in a
// --config=cuda build; elsewhere the host's clock alone).
#pragma once

#include <functional>

namespace ps::tools {

// Waits for the current CUDA device's work (nothing without CUDA).
void SynchronizeDevice();

// Best of `iters` timed runs of `fn` in milliseconds, after one untimed warm-up run.
double BestMs(int iters, const std::function<void()>& fn);

}  // namespace ps::tools
