#include "models/lora.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "models/leaf_linear.h"
#include "models/module_path.h"
#include "models/param_init.h"

namespace ps::models {
namespace {

bool EndsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// The adapter of `m`: its children lora_A and lora_B; {nullptr, nullptr} when it has none.
std::pair<LoraFactorImpl*, LoraFactorImpl*> AdapterOf(torch::nn::Linear& m) {
  const auto children = m->children();
  if (children.size() != 2) return {nullptr, nullptr};
  return {children[0]->as<LoraFactorImpl>(), children[1]->as<LoraFactorImpl>()};
}

}  // namespace

LoraFactorImpl::LoraFactorImpl(int64_t rows, int64_t cols) {
  weight = register_parameter("weight", at::empty({rows, cols}, at::kFloat));
}

std::vector<std::string> AttachLora(const std::vector<NamedLinear>& linears, const LoraConfig& config,
                                    const std::vector<std::string>& default_targets) {
  TORCH_CHECK(config.r > 0, "lora.r must be positive, got ", config.r);
  const std::vector<std::string>& targets = config.target_modules.empty() ? default_targets : config.target_modules;
  std::set<std::string> names;  // the module names there are, for the error
  for (const auto& l : linears) names.insert(ModuleName(l.path));
  for (const auto& t : targets) {
    if (names.count(t) != 0) continue;
    std::string known;
    for (const auto& n : names) known += (known.empty() ? "" : ", ") + n;
    TORCH_CHECK(false, "lora.target_modules: '", t, "' names no module of this model; its Linear modules are: ",
                known);
  }
  const double scale = LoraScale(config);
  std::vector<std::string> adapted;
  for (const auto& l : linears) {
    if (std::find(targets.begin(), targets.end(), ModuleName(l.path)) == targets.end()) continue;
    torch::nn::Linear linear = l.linear;
    TORCH_CHECK(linear->children().empty(), l.path, " has an adapter already");
    const auto& o = linear->options;
    LoraFactor a = linear->register_module("lora_A", LoraFactor(config.r, o.in_features()));
    LoraFactor b = linear->register_module("lora_B", LoraFactor(o.out_features(), config.r));
    b->scale = scale;
    b->dropout = config.dropout;
    adapted.push_back(l.path);
  }
  return adapted;
}

void InitLoraParameter(const std::string& name, at::Tensor values, uint64_t run_seed) {
  CheckInitValues(name, values);
  TORCH_CHECK(IsLoraParameter(name) && values.dim() == 2, name, " is not an adapter factor");
  at::NoGradGuard no_grad;
  if (EndsWith(name, ".lora_B.weight")) {
    values.zero_();
    return;
  }
  // kaiming_uniform_(a=sqrt(5)): gain sqrt(2 / (1 + 5)), bound gain * sqrt(3 / fan_in).
  const double bound = 1.0 / std::sqrt(static_cast<double>(values.size(1)));
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(ParameterSeed(run_seed, name));
  values.uniform_(-bound, bound, gen);
}

at::Tensor ApplyLinear(torch::nn::Linear& m, const at::Tensor& x, bool leaf) {
  at::Tensor y = leaf ? LeafLinear(x, m->weight, m->bias) : m->forward(x);
  const auto [a, b] = AdapterOf(m);
  if (a == nullptr || b == nullptr) return y;
  const at::Tensor in = b->dropout > 0 ? at::dropout(x, b->dropout, m->is_training()) : x;
  const at::Tensor down = leaf ? LeafLinear(in, a->weight, {}) : at::linear(in, a->weight);
  const at::Tensor up = leaf ? LeafLinear(down, b->weight, {}) : at::linear(down, b->weight);
  return y + up * b->scale;
}

at::Tensor MergedWeight(torch::nn::Linear& m) {
  at::NoGradGuard no_grad;
  const at::Tensor w = m->weight.to(at::kFloat);
  const auto [a, b] = AdapterOf(m);
  if (a == nullptr || b == nullptr) return w;
  return w + b->weight.to(at::kFloat).mm(a->weight.to(at::kFloat)) * b->scale;
}

}  // namespace ps::models
