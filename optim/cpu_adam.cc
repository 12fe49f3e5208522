#include "optim/cpu_adam.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <thread>

#include "optim/block_quant.h"
#include "optim/cpu_adam_element.h"

namespace ps::optim {

AdamHyper AdamHyper::Make(double lr, double beta1, double beta2, double eps, double weight_decay, bool adamw,
                          int64_t step, double grad_scale) {
  if (step < 1) throw std::invalid_argument("AdamHyper::Make: step is 1-based, got " + std::to_string(step));
  AdamHyper h;
  h.grad_scale = static_cast<float>(grad_scale);
  h.beta1 = static_cast<float>(beta1);
  h.beta2 = static_cast<float>(beta2);
  h.one_minus_beta1 = static_cast<float>(1.0 - beta1);
  h.one_minus_beta2 = static_cast<float>(1.0 - beta2);
  h.eps = static_cast<float>(eps);
  h.decay_factor = adamw ? static_cast<float>(1.0 - lr * weight_decay) : 1.0f;
  h.l2 = adamw ? 0.0f : static_cast<float>(weight_decay);
  const double bias_correction1 = 1.0 - std::pow(beta1, static_cast<double>(step));
  const double bias_correction2 = 1.0 - std::pow(beta2, static_cast<double>(step));
  h.step_size = static_cast<float>(lr / bias_correction1);
  h.inv_sqrt_bias_correction2 = static_cast<float>(1.0 / std::sqrt(bias_correction2));
  return h;
}

bool CpuSupports(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kScalar: return true;
    case CpuIsa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    case CpuIsa::kAvx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("f16c") && __builtin_cpu_supports("fma");
  }
  return false;
}

namespace internal {
// Here, not in the AVX-512 translation unit: this check runs on any CPU.
bool CpuHasAvx512Vbmi() { return CpuSupports(CpuIsa::kAvx512) && __builtin_cpu_supports("avx512vbmi"); }
}  // namespace internal

CpuIsa BestCpuIsa() {
  if (CpuSupports(CpuIsa::kAvx512)) return CpuIsa::kAvx512;
  if (CpuSupports(CpuIsa::kAvx2)) return CpuIsa::kAvx2;
  return CpuIsa::kScalar;
}

CpuAdamKernels KernelsFor(CpuIsa isa) {
  if (!CpuSupports(isa)) {
    throw std::invalid_argument(std::string("CPU Adam: this CPU does not support the ") + ToString(isa) + " variant");
  }
  switch (isa) {
    case CpuIsa::kScalar: return {isa, internal::AdamScalar, internal::SumSquaresScalar};
    case CpuIsa::kAvx2: return {isa, internal::AdamAvx2, internal::SumSquaresAvx2};
    case CpuIsa::kAvx512: return {isa, internal::AdamAvx512, internal::SumSquaresAvx512};
  }
  throw std::invalid_argument("CPU Adam: unknown variant");
}

const char* ToString(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kScalar: return "scalar";
    case CpuIsa::kAvx2: return "avx2";
    case CpuIsa::kAvx512: return "avx512";
  }
  return "?";
}

CpuIsa ParseCpuIsa(const char* name) {
  const std::string n(name);
  if (n == "auto") return BestCpuIsa();
  if (n == "scalar") return CpuIsa::kScalar;
  if (n == "avx2") return CpuIsa::kAvx2;
  if (n == "avx512") return CpuIsa::kAvx512;
  throw std::invalid_argument("CPU Adam variant '" + n + "': expected auto, scalar, avx2 or avx512");
}

namespace {

using internal::ElemBytes;
using internal::SubSpan;

// Work is split at whole blocks of this many elements: the int8 state's quantisation
// blocks, so no block is cut between threads.
constexpr int64_t kBlockNumel = kQuantBlockNumel;

}  // namespace

namespace {

// Pins the calling thread to cpus[t % size], nothing when `cpus` is empty (best effort:
// a CPU the process may not use is refused by the kernel and the thread floats); with
// `restore`, the thread's mask before is given back on destruction.
class ScopedPin {
 public:
  ScopedPin(const std::vector<int>& cpus, int t, bool restore) {
    CPU_ZERO(&old_);
    if (cpus.empty()) return;
    // Restores only a mask it could read (else leaving the thread pinned is the lesser evil
    // than pinning it to nothing).
    restore_ = restore && pthread_getaffinity_np(pthread_self(), sizeof(old_), &old_) == 0;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpus[static_cast<size_t>(t) % cpus.size()], &set);
    pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
  }
  ~ScopedPin() {
    if (restore_) pthread_setaffinity_np(pthread_self(), sizeof(old_), &old_);
  }
  ScopedPin(const ScopedPin&) = delete;
  ScopedPin& operator=(const ScopedPin&) = delete;

 private:
  bool restore_ = false;
  cpu_set_t old_;
};

// Calls `run(item, begin, end)` for every piece of the concatenated items (sizes from
// `numel_of`), thread t taking elements [t * per, (t + 1) * per), each cut moved down to
// a whole kBlockNumel-element block of its item. Returns the number of threads used; `run`
// receives the thread index too. With `cpus`, thread t runs pinned to cpus[t % size].
template <typename Item, typename NumelOf, typename Run>
int SplitOverThreads(const std::vector<Item>& items, NumelOf numel_of, int threads, const std::vector<int>& cpus,
                     Run run) {
  int64_t total = 0;
  for (const auto& it : items) total += numel_of(it);
  if (total == 0) return 0;
  const int64_t max_threads = std::max<int64_t>(1, (total + kBlockNumel - 1) / kBlockNumel);
  const int t_count = static_cast<int>(std::clamp<int64_t>(threads, 1, std::min<int64_t>(max_threads, 1024)));
  const int64_t per = ((total + t_count - 1) / t_count + kBlockNumel - 1) / kBlockNumel * kBlockNumel;
  auto run_range = [&](int t, int64_t lo, int64_t hi) {
    int64_t item_start = 0;
    for (const auto& it : items) {
      const int64_t n = numel_of(it);
      const auto cut = [&](int64_t global) {
        const int64_t local = std::clamp<int64_t>(global - item_start, 0, n);
        return local == n ? local : local / kBlockNumel * kBlockNumel;
      };
      const int64_t b = cut(lo), e = cut(hi);
      if (e > b) run(t, it, b, e);
      item_start += n;
      if (item_start >= hi) break;
    }
  };
  ScopedPin pin_caller(cpus, 0, /*restore=*/true);
  if (t_count == 1) {
    run_range(0, 0, total);
    return 1;
  }
  std::vector<std::thread> pool;
  pool.reserve(t_count - 1);
  for (int t = 1; t < t_count; ++t) {
    const int64_t lo = std::min(total, t * per), hi = t + 1 == t_count ? total : std::min(total, (t + 1) * per);
    pool.emplace_back([&run_range, &cpus, t, lo, hi] {
      ScopedPin pin(cpus, t, /*restore=*/false);  // a thread of this call only
      run_range(t, lo, hi);
    });
  }
  run_range(0, 0, std::min(total, per));
  for (auto& th : pool) th.join();
  return t_count;
}

}  // namespace

void ParallelAdam(const CpuAdamKernels& kernels, const std::vector<AdamWork>& work, int threads) {
  SplitOverThreads(
      work, [](const AdamWork& w) { return w.span.numel; }, threads, kernels.pin_cpus,
      [&](int, const AdamWork& w, int64_t b, int64_t e) { kernels.adam(SubSpan(w.span, b, e), w.hyper); });
}

double ParallelSumSquares(const CpuAdamKernels& kernels, const std::vector<GradSpan>& spans, int threads) {
  std::vector<double> partial(static_cast<size_t>(std::clamp(threads, 1, 1024)), 0.0);
  SplitOverThreads(spans, [](const GradSpan& s) { return s.numel; }, threads, kernels.pin_cpus,
                   [&](int t, const GradSpan& s, int64_t b, int64_t e) {
                     partial[t] += kernels.sum_squares(static_cast<const char*>(s.grad) + b * ElemBytes(s.type),
                                                       s.type, e - b);
                   });
  double sum = 0.0;
  for (double p : partial) sum += p;
  return sum;
}

float HalfBitsToFloat(uint16_t bits) { return internal::ScalarHalfToFloat(bits); }
uint16_t FloatToHalfBits(float value) { return internal::ScalarFloatToHalf(value); }
float Bf16BitsToFloat(uint16_t bits) { return internal::ScalarBf16ToFloat(bits); }
uint16_t FloatToBf16Bits(float value) { return internal::ScalarFloatToBf16(value); }
uint32_t SrHash(uint32_t index, uint32_t seed) { return internal::ScalarSrHash(index, seed); }
uint16_t FloatToBf16Stochastic(float value, uint32_t hash) { return internal::ScalarFloatToBf16Stochastic(value, hash); }

}  // namespace ps::optim
