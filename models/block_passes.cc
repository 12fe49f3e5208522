#include "models/block_passes.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <c10/util/Exception.h>

#include "models/recompute.h"

namespace ps::models {

at::Tensor ForwardBlocks(const BlockPasses& p, const at::Tensor& idx, LayerHooks* hooks) {
  LayerHooks none;
  LayerHooks& hk = hooks ? *hooks : none;
  int block = 0;
  hk.PreForward(block);
  at::Tensor x = hk.PostForward(block, p.embed(idx));
  for (++block; block <= p.n_layer; ++block) {
    hk.PreForward(block);
    x = hk.PostForward(block, p.run_block(block, x));
  }
  hk.PreForward(block);
  return hk.PostForward(block, p.head(x));
}

at::Tensor MeanCrossEntropy(const at::Tensor& logits, const at::Tensor& targets) {
  return at::cross_entropy_loss(logits.reshape({-1, logits.size(-1)}).to(at::kFloat), targets.reshape({-1}));
}

std::vector<at::Tensor> LossManyBlockMajor(const BlockPasses& p, const std::vector<at::Tensor>& idx,
                                           const std::vector<at::Tensor>& targets, bool training, LayerHooks* hooks) {
  TORCH_CHECK(!idx.empty() && idx.size() == targets.size(), "LossMany: ", idx.size(), " inputs for ", targets.size(),
              " targets");
  TORCH_CHECK(p.recompute || !at::GradMode::is_enabled() || !training,
              "LossMany (train.accumulation_schedule: vertical) needs model.activation_checkpointing: true in "
              "training: it keeps every micro-batch's block inputs, and only those");
  LayerHooks none;
  LayerHooks& hk = hooks ? *hooks : none;
  const size_t k = idx.size();
  std::vector<at::Tensor> x(k);
  auto each = [&](int block, const std::function<at::Tensor(size_t)>& run) {
    hk.PreForward(block);
    for (size_t m = 0; m < k; ++m) x[m] = run(m);
    for (size_t m = 0; m < k; ++m) x[m] = hk.PostForward(block, x[m]);
  };
  each(0, [&](size_t m) { return p.embed(idx[m]); });
  for (int block = 1; block <= p.n_layer; ++block) {
    each(block, [&](size_t m) { return p.run_block(block, x[m]); });
  }
  const int last = p.n_layer + 1;
  each(last, [&](size_t m) {
    if (!p.recompute) return MeanCrossEntropy(p.head(x[m]), targets[m]);
    // k micro-batches' logits (vocab_size per token, with their fp32 copy) would dwarf
    // the block inputs: the head runs again in backward, one micro-batch at a time.
    const at::Tensor t = targets[m];
    const auto head = p.head;
    return RecomputedCall(
        x[m], [head, t](const at::Tensor& in) { return MeanCrossEntropy(head(in), t); },
        [hooks, last] {  // `hooks` may be null: the callers' default no-op object dies with them
          if (hooks) hooks->PreForward(last);
        });
  });
  return x;
}

}  // namespace ps::models
