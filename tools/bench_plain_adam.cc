// The plain engine's optimizer step, old against new, on the CPU: LibTorch's
// per-parameter torch::optim::AdamW + clip_grad_norm_ against optim::FusedAdam (one fused
// multi-tensor call per decay group, clip folded in), on the parameter shapes of a GPT-2
// preset. Prints ms per step and the ratio.
//   bazel run -c opt //tools:bench_plain_adam -- [--preset gpt2-124m] [--steps 5] [--threads 0]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/adamw.h>

#include <chrono>
#include <cxxopts.hpp>
#include <iostream>

#include "models/gpt_config.h"
#include "optim/fused_adam.h"

namespace {

using Clock = std::chrono::steady_clock;

std::vector<at::Tensor> Params(const ps::models::GptConfig& c) {
  std::vector<at::Tensor> out;
  for (const auto& p : ps::models::GptParameterShapes(c)) {
    // 2-D for the matrices (decayed), 1-D for biases and norms, as the model has them.
    const bool matrix = p.name.find("weight") != std::string::npos && p.name.find("ln") == std::string::npos;
    auto t = matrix ? at::randn({p.numel / c.n_embd, c.n_embd}) : at::randn({p.numel});
    t.requires_grad_();
    t.mutable_grad() = at::randn_like(t);
    out.push_back(t);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  cxxopts::Options options("bench_plain_adam", "Plain-engine optimizer step: torch::optim::AdamW vs FusedAdam");
  options.add_options()("preset", "GPT preset", cxxopts::value<std::string>()->default_value("gpt2-124m"))(
      "steps", "timed steps", cxxopts::value<int>()->default_value("5"))(
      "threads", "CPU threads; 0 = all", cxxopts::value<int>()->default_value("0"));
  const auto args = options.parse(argc, argv);
  if (args["threads"].as<int>() > 0) at::set_num_threads(args["threads"].as<int>());
  ps::models::GptConfig c;
  const auto preset = ps::models::FindGptPreset(args["preset"].as<std::string>());
  if (!preset) {
    std::cerr << "unknown preset\n";
    return 2;
  }
  c.n_layer = preset->n_layer;
  c.n_head = preset->n_head;
  c.n_embd = preset->n_embd;
  c.n_positions = preset->n_positions;
  c.vocab_size = preset->vocab_size;
  const int steps = args["steps"].as<int>();
  ps::optim::OptimizerConfig oc;
  oc.weight_decay = 0.1;

  auto old_params = Params(c);
  std::vector<at::Tensor> decay, no_decay;
  for (const auto& p : old_params) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(1e-4).weight_decay(0.1)));
  groups.emplace_back(no_decay, std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(1e-4).weight_decay(0.0)));
  torch::optim::AdamW reference(groups, torch::optim::AdamWOptions(1e-4));
  auto time_it = [&](const std::function<void()>& step) {
    step();  // state allocation
    const auto t0 = Clock::now();
    for (int i = 0; i < steps; ++i) step();
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / steps;
  };
  const double old_ms = time_it([&] {
    torch::nn::utils::clip_grad_norm_(old_params, 1.0);
    reference.step();
  });
  old_params.clear();
  auto new_params = Params(c);
  ps::optim::FusedAdam fused(new_params, oc);
  const double new_ms = time_it([&] { fused.Step(1e-4, 1.0); });
  std::cout << preset->name << " (" << ps::models::GptParameterCount(c) / 1e6 << "M parameters), " << at::get_num_threads()
            << " threads: torch::optim::AdamW + clip_grad_norm_ " << old_ms << " ms/step, FusedAdam " << new_ms
            << " ms/step: " << old_ms / new_ms << "x\n";
  return 0;
}
