#include "trainer/io/rng_state.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <c10/util/Exception.h>

#include <mutex>

namespace ps::trainer {
namespace {

at::Generator GeneratorOf(at::Device device) {
  if (device.is_cuda()) return at::globalContext().defaultGenerator(device);
  return at::detail::getDefaultCPUGenerator();
}

void Restore(at::Generator gen, const models::TensorMap& states, const std::string& key) {
  const auto it = states.find(key);
  TORCH_CHECK(it != states.end(), "checkpoint: the random generator state '", key, "' is missing");
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(it->second);  // checks the size and dtype itself
}

}  // namespace

models::TensorMap SaveRngStates(at::Device device) {
  models::TensorMap out;
  auto save = [&](at::Generator gen, const std::string& key) {
    std::lock_guard<std::mutex> lock(gen.mutex());
    out[key] = gen.get_state();
  };
  save(GeneratorOf(at::kCPU), "rng.cpu");
  if (device.is_cuda()) save(GeneratorOf(device), "rng.cuda");
  return out;
}

void RestoreRngStates(const models::TensorMap& states, at::Device device) {
  Restore(GeneratorOf(at::kCPU), states, "rng.cpu");
  if (device.is_cuda()) Restore(GeneratorOf(device), states, "rng.cuda");
}

}  // namespace ps::trainer
