// Runs independent tasks on a few threads, each thread taking the next task when it is
// free (so tasks of very different sizes still keep every thread busy when run in
// LargestFirst's order). For start-up work over parameters and chunks.
//
// Why not at::parallel_for: its OpenMP split is a header template compiled into the
// caller, and only under -fopenmp; this project is not built with it (OpenMP belongs to
// LibTorch's build; linking a second runtime is asking for trouble), so in our code
// at::parallel_for runs every range on the calling thread.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace ps::base {

// Calls work(task, thread) once for every task in [0, tasks), on `threads` threads (the
// calling thread is thread 0; fewer when there are fewer tasks, or when the system gives
// no more threads). Inside, autograd is off and LibTorch's own intra-op parallelism is
// (its OpenMP runtime's thread count is 1 on these threads), so the threads are not
// oversubscribed; the caller's settings come back after. The first exception a task throws stops the rest from starting and
// is rethrown here once every thread has finished.
void ParallelTasks(int64_t tasks, int threads, const std::function<void(int64_t task, int thread)>& work);

// The order to run tasks of these sizes in: their indices, the largest first (equal sizes
// in index order), so no large task starts last while the other threads stand idle.
std::vector<int64_t> LargestFirst(const std::vector<int64_t>& sizes);

}  // namespace ps::base
