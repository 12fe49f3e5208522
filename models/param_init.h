// Initial values of a model's parameters, keyed per parameter.
//
// Each parameter's initial values come from a CPU generator of its own, seeded by
// ParameterSeed(run seed, parameter name), so they depend on nothing but the seed, the
// name and the shape: not on the order parameters are initialised in, on the thread,
// or on where the values are written (a plain parameter's storage, or its slot in a
// chunk). Plain and chunk runs of one seed therefore start from the same weights, and
// the parameters can be initialised in parallel (InitParameters; the chunk runtime's
// RuntimeOptions::initial_values).
//
// The distributions are the models' (GPT-2 and HF BERT): InitGptParameter (gpt.h) and
// InitBertParameter (bert.h). `values` is always fp32 and contiguous, of the parameter's shape.
// Each call is single-threaded (one generator); callers parallelise over parameters.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

namespace ps::models {

struct BlockParameter;

// A 64-bit seed of its own for parameter `name` of a run seeded `run_seed` (FNV-1a of
// the name, mixed with the seed by splitmix64; the same on every platform).
uint64_t ParameterSeed(uint64_t run_seed, const std::string& name);

// N(0, std) into `values` (fp32, contiguous, host) from parameter `name`'s own generator.
void FillNormal(at::Tensor& values, double std, uint64_t run_seed, const std::string& name);
// Checks that `values` can take initial values (fp32, contiguous, host).
void CheckInitValues(const std::string& name, const at::Tensor& values);

// What a run initialises: every parameter from `seed`, except those in `provided` (their
// values come from elsewhere, model.init_from, and are written later).
struct InitPlan {
  uint64_t seed = 0;
  std::set<std::string> provided;
  // Every parameter comes from elsewhere (a resumed checkpoint, whose Load rejects a
  // missing one): nothing is randomly initialised.
  bool all_provided = false;
  bool Initialises(const std::string& name) const { return !all_provided && provided.count(name) == 0; }
};

// Writes the initial values of parameter `name` into `values` (fp32, contiguous).
using ParameterInitFn = std::function<void(const std::string& name, at::Tensor values)>;

// Tag of the model constructors that leave parameters uninitialised (built with
// uninitialised_modules.h): their storage is allocated (fp32, host) but never written, so it costs no memory bandwidth and, for
// the pages a chunk run never touches, no resident memory.
struct Uninitialised {};
inline constexpr Uninitialised kUninitialised{};

// A run seed drawn from LibTorch's default CPU generator: models built without a run
// seed (tests, tools) are still decided by torch::manual_seed.
uint64_t SeedFromDefaultGenerator();

// Fills each parameter of `params` (fp32, contiguous, on the host: a model as built) in
// place with `init` where plan.Initialises(name); the others are left as they are.
// Parallel over parameters, the largest first (base::ParallelTasks, at::get_num_threads() threads).
void InitParameters(const std::vector<BlockParameter>& params, const InitPlan& plan, const ParameterInitFn& init);

}  // namespace ps::models
