// base::ParallelTasks: every task exactly once, on the threads asked for (the calling
// thread among them), tasks handed to whichever thread is free, autograd and LibTorch's
// intra-op parallelism off inside, a task's exception rethrown after every thread ends.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "base/parallel_tasks.h"
#include "tests/catch.h"

namespace ps::base {
namespace {

TEST_CASE("ParallelTasks: every task once, on the threads asked for", "[parallel_tasks]") {
  for (int threads : {1, 3, 8}) {
    std::vector<std::atomic<int>> runs(1000);
    std::mutex mutex;
    std::set<std::thread::id> ids;
    std::set<int> slots;
    ParallelTasks(static_cast<int64_t>(runs.size()), threads, [&](int64_t task, int thread) {
      runs[task]++;
      std::lock_guard<std::mutex> lock(mutex);
      ids.insert(std::this_thread::get_id());
      slots.insert(thread);
    });
    for (const auto& r : runs) CHECK(r == 1);
    CHECK(ids.size() <= static_cast<size_t>(threads));
    if (threads == 1) CHECK(ids == std::set<std::thread::id>{std::this_thread::get_id()});  // the caller's
    CHECK(*slots.rbegin() < threads);
  }
  int calls = 0;
  ParallelTasks(0, 4, [&](int64_t, int) { ++calls; });
  CHECK(calls == 0);
  std::atomic<int> highest{0};
  ParallelTasks(2, 16, [&](int64_t, int thread) { highest = std::max(highest.load(), thread); });
  CHECK(highest < 2);  // no more threads than tasks
}

TEST_CASE("ParallelTasks: a free thread takes the next task (one long task does not hold the rest)",
          "[parallel_tasks]") {
  std::atomic<int> done_while_long{0};
  std::atomic<bool> long_running{true};
  ParallelTasks(41, 2, [&](int64_t task, int) {
    if (task == 0) {  // the longest first: the other thread must do all 40 others meanwhile
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (done_while_long < 40 && std::chrono::steady_clock::now() < until) std::this_thread::yield();
      long_running = false;
      return;
    }
    if (long_running) done_while_long++;
  });
  CHECK(done_while_long == 40);
}

TEST_CASE("ParallelTasks: autograd and LibTorch's intra-op threads off inside", "[parallel_tasks]") {
  using MaxThreads = int (*)();
  const auto omp_max = reinterpret_cast<MaxThreads>(dlsym(RTLD_DEFAULT, "omp_get_max_threads"));
  REQUIRE(omp_max != nullptr);  // LibTorch's OpenMP runtime (this project's LibTorch has one)
  at::set_num_threads(2);
  const int before = omp_max();
  c10::AutoGradMode grad_on(true);
  std::atomic<int> grad_seen{0}, wide_seen{0};  // (Catch's checks are for this thread only)
  ParallelTasks(4, 2, [&](int64_t, int) {
    at::zeros({1 << 20}).add_(1);  // LibTorch's first use on a new thread resets its OpenMP count
    grad_seen += c10::GradMode::is_enabled() ? 1 : 0;
    wide_seen += omp_max() != 1 ? 1 : 0;
  });
  CHECK(grad_seen == 0);
  CHECK(wide_seen == 0);
  CHECK(c10::GradMode::is_enabled());  // the caller's settings are back
  CHECK(omp_max() == before);
}

TEST_CASE("ParallelTasks: a task's exception reaches the caller after every thread ends", "[parallel_tasks]") {
  std::atomic<int> started{0};
  std::atomic<bool> failing{false};
  CHECK_THROWS_WITH(ParallelTasks(2000, 4,
                                  [&](int64_t task, int) {
                                    started++;
                                    if (task == 3) {
                                      failing = true;
                                      throw std::runtime_error("task 3 failed");
                                    }
                                    if (task < 3) return;
                                    while (!failing) std::this_thread::yield();  // until task 3 has thrown
                                    std::this_thread::sleep_for(std::chrono::milliseconds(2));
                                  }),
                    "task 3 failed");
  CHECK(started < 100);  // no new task starts after the failure (2000 would run without it)
}

TEST_CASE("LargestFirst: indices by size, the largest first, ties in index order", "[parallel_tasks]") {
  CHECK(LargestFirst({3, 9, 1, 9, 0, 3}) == std::vector<int64_t>{1, 3, 0, 5, 2, 4});
  CHECK(LargestFirst({}).empty());
}

}  // namespace
}  // namespace ps::base
