#include "models/param_init.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <c10/util/Exception.h>

#include <cmath>
#include <mutex>

#include "base/parallel_tasks.h"
#include "models/block_parameter.h"

namespace ps::models {
namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

uint64_t SeedFromDefaultGenerator() {
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  return at::check_generator<at::CPUGeneratorImpl>(gen)->random64();
}

uint64_t ParameterSeed(uint64_t run_seed, const std::string& name) {
  uint64_t h = 0xCBF29CE484222325ull;  // FNV-1a
  for (const char ch : name) {
    h ^= static_cast<uint8_t>(ch);
    h *= 0x100000001B3ull;
  }
  return SplitMix64(SplitMix64(run_seed) ^ h);
}

void CheckInitValues(const std::string& name, const at::Tensor& values) {
  TORCH_INTERNAL_ASSERT(values.scalar_type() == at::kFloat && values.is_contiguous() && values.device().is_cpu(),
                        "initial values of '", name, "' must be written into contiguous fp32 host memory");
}

void FillNormal(at::Tensor& values, double std, uint64_t run_seed, const std::string& name) {
  CheckInitValues(name, values);
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(ParameterSeed(run_seed, name));
  at::NoGradGuard no_grad;
  values.normal_(0.0, std, gen);
}

void InitParameters(const std::vector<BlockParameter>& params, const InitPlan& plan, const ParameterInitFn& init) {
  std::vector<const BlockParameter*> todo;
  for (const auto& p : params) {
    if (plan.Initialises(p.name)) todo.push_back(&p);
  }
  // One parameter per task, the largest first, each call single-threaded with its own
  // generator, on run.threads threads (base/parallel_tasks.h).
  std::vector<int64_t> sizes;
  for (const BlockParameter* p : todo) sizes.push_back(p->tensor.numel());
  const std::vector<int64_t> order = ps::base::LargestFirst(sizes);
  ps::base::ParallelTasks(static_cast<int64_t>(order.size()), at::get_num_threads(), [&](int64_t task, int) {
    const BlockParameter& p = *todo[order[task]];
    init(p.name, p.tensor.detach());
  });
}

}  // namespace ps::models
