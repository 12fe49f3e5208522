#include "base/parallel_tasks.h"

#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <numeric>
#include <system_error>
#include <thread>
#include <vector>

namespace ps::base {
namespace {

// LibTorch's OpenMP runtime (the libgomp libtorch_cpu links), found at run time: this
// project does not link OpenMP itself. Null where LibTorch has none.
using OmpSetThreads = void (*)(int);
using OmpMaxThreads = int (*)();

// While it lives, LibTorch's parallel ops on this thread use this thread alone (OpenMP's
// thread count is per thread; the one in force before comes back after). LibTorch sets a
// thread's count to at::set_num_threads' on the thread's first use (lazily), so that use
// comes first here: else a worker's first op would undo the 1.
class OneOpenMpThread {
 public:
  OneOpenMpThread() {
    (void)at::get_num_threads();  // LibTorch's per-thread first use
    static const auto set = reinterpret_cast<OmpSetThreads>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
    static const auto max = reinterpret_cast<OmpMaxThreads>(dlsym(RTLD_DEFAULT, "omp_get_max_threads"));
    if (set == nullptr || max == nullptr) return;
    set_ = set;
    before_ = max();
    set_(1);
  }
  ~OneOpenMpThread() {
    if (set_ != nullptr) set_(before_);
  }
  OneOpenMpThread(const OneOpenMpThread&) = delete;
  OneOpenMpThread& operator=(const OneOpenMpThread&) = delete;

 private:
  OmpSetThreads set_ = nullptr;
  int before_ = 1;
};

}  // namespace

void ParallelTasks(int64_t tasks, int threads, const std::function<void(int64_t task, int thread)>& work) {
  if (tasks <= 0) return;
  const int n = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, tasks)));
  std::atomic<int64_t> next{0};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto run = [&](int thread) {
    c10::AutoGradMode no_grad(false);
    OneOpenMpThread one_omp_thread;
    try {
      for (int64_t task = next++; task < tasks; task = next++) work(task, thread);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!error) error = std::current_exception();
      next = tasks;  // no new task starts
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < n; ++t) {
    try {
      pool.emplace_back(run, t);
    } catch (const std::system_error&) {  // no more threads to be had: the ones started do the work
      break;
    }
  }
  run(0);
  for (std::thread& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

std::vector<int64_t> LargestFirst(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> order(sizes.size());
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return sizes[a] > sizes[b]; });
  return order;
}

}  // namespace ps::base
