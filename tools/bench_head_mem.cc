// The LM head's memory, materialised and sliced: the peak CPU allocator bytes of
// one training step (forward and backward) of a small GPT with a large vocabulary (an
// untied head, as Llama 3 8B's), its loss through
//   none          the final norm's output, squared and averaged: no head (the baseline),
//   materialised  MeanCrossEntropy of forward()'s logits (the path before),
//   sliced        GptImpl::Loss: the sliced head (models/sliced_head.h).
// The head's share of a step is its peak minus the baseline's. Allocations are counted
// by chunkmem's CPU memory probe (every LibTorch CPU allocation on this thread; the
// parameters, made before, are not counted; their gradients are). Prints one line per
// mode and a JSON line.
//   bazel run //tools:bench_head_mem -- [--vocab 128256] [--batch 4] [--seq 512]
//       [--n_embd 128] [--slice 0] [--bf16]
#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>

#include <chrono>
#include <cxxopts.hpp>
#include <iostream>
#include <string>

#include "chunkmem/memory_probe.h"
#include "models/block_passes.h"
#include "models/gpt.h"

namespace {

using ps::models::Gpt;

at::Tensor NoHeadLoss(Gpt& model, const at::Tensor& idx) {
  const at::Tensor pos = at::arange(idx.size(1), idx.options());
  at::Tensor x = model->wte(idx) + model->wpe(pos);
  for (const auto& block : *model->h) x = block->as<ps::models::BlockImpl>()->forward(x);
  return model->ln_f(x).to(at::kFloat).square().mean();
}

struct Measured {
  int64_t peak_bytes;
  double seconds;
};

Measured Step(Gpt& model, const std::string& mode, const at::Tensor& idx, bool bf16) {
  model->zero_grad();
  auto probe = ps::chunkmem::MakeCpuMemoryProbe();
  const auto start = std::chrono::steady_clock::now();
  at::Tensor loss;
  {
    at::autocast::set_autocast_enabled(at::kCPU, bf16);
    at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
    if (mode == "none") loss = NoHeadLoss(model, idx);
    if (mode == "materialised") loss = ps::models::MeanCrossEntropy(model->forward(idx), idx);
    if (mode == "sliced") loss = model->Loss(idx, idx);
    at::autocast::set_autocast_enabled(at::kCPU, false);
    at::autocast::clear_cache();
  }
  loss.backward();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return {probe->TakePeakNonModelBytes(), seconds};
}

}  // namespace

int main(int argc, char** argv) {
  cxxopts::Options options("bench_head_mem", "Peak memory of a training step: materialised vs sliced LM head");
  options.add_options()("vocab", "vocabulary size", cxxopts::value<int64_t>()->default_value("128256"))(
      "batch", "micro-batch size", cxxopts::value<int64_t>()->default_value("4"))(
      "seq", "sequence length", cxxopts::value<int64_t>()->default_value("512"))(
      "n_embd", "hidden width", cxxopts::value<int64_t>()->default_value("128"))(
      "slice", "model.loss_slice_tokens (0 = the default)", cxxopts::value<int64_t>()->default_value("0"))(
      "bf16", "bf16 autocast, as the plain engine's precision.dtype: bf16");
  const auto args = options.parse(argc, argv);
  ps::models::GptConfig c;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = args["n_embd"].as<int64_t>();
  c.n_positions = args["seq"].as<int64_t>();
  c.vocab_size = args["vocab"].as<int64_t>();
  c.tie_word_embeddings = false;
  c.loss_slice_tokens = args["slice"].as<int64_t>();
  const bool bf16 = args.count("bf16") > 0;
  at::manual_seed(0);
  Gpt model(c);
  const at::Tensor idx = at::randint(0, c.vocab_size, {args["batch"].as<int64_t>(), c.n_positions}, at::kLong);
  const int64_t tokens = idx.numel();
  const int64_t slice = std::min(tokens, ps::models::LossSliceTokens(c.loss_slice_tokens, c.vocab_size));
  std::cout << "vocab " << c.vocab_size << ", " << tokens << " tokens, n_embd " << c.n_embd << ", "
            << (bf16 ? "bf16 autocast" : "fp32") << ", slice " << slice << " tokens; fp32 logits: all "
            << tokens * c.vocab_size * 4 << " bytes, one slice " << slice * c.vocab_size * 4 << "\n";
  std::string json = "{\"vocab\": " + std::to_string(c.vocab_size) + ", \"tokens\": " + std::to_string(tokens) +
                     ", \"slice_tokens\": " + std::to_string(slice) + ", \"bf16\": " + (bf16 ? "true" : "false");
  int64_t baseline = 0;
  for (const std::string mode : {"none", "materialised", "sliced"}) {
    Step(model, mode, idx, bf16);  // warm-up: one-time allocations are not the head's
    const Measured m = Step(model, mode, idx, bf16);
    if (mode == "none") baseline = m.peak_bytes;
    std::cout << mode << ": peak " << m.peak_bytes << " bytes, head's share " << m.peak_bytes - baseline << " bytes, "
              << m.seconds << " s" << std::endl;
    json += ", \"" + mode + "_peak_bytes\": " + std::to_string(m.peak_bytes) + ", \"" + mode +
            "_s\": " + std::to_string(m.seconds);
  }
  std::cout << json << "}\n";
  return 0;
}
