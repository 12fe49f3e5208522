#include "models/block_passes.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <c10/util/Exception.h>

#include "models/recompute.h"

namespace ps::models {

namespace {
// Blocks 0..n_layer, then `last` as block n_layer + 1, each between its hooks.
at::Tensor RunBlocks(const BlockPasses& p, const at::Tensor& idx, LayerHooks* hooks, const PackedRows& rows,
                     const std::function<at::Tensor(const at::Tensor&)>& last) {
  LayerHooks none;
  LayerHooks& hk = hooks ? *hooks : none;
  int block = 0;
  hk.PreForward(block);
  at::Tensor x = hk.PostForward(block, p.embed(idx, rows));
  for (++block; block <= p.n_layer; ++block) {
    hk.PreForward(block);
    x = hk.PostForward(block, p.run_block(block, x, rows));
  }
  hk.PreForward(block);
  return hk.PostForward(block, last(x));
}
}  // namespace

at::Tensor ForwardBlocks(const BlockPasses& p, const at::Tensor& idx, LayerHooks* hooks, const PackedRows& rows) {
  return RunBlocks(p, idx, hooks, rows, p.head);
}

at::Tensor LossBlocks(const BlockPasses& p, const at::Tensor& idx, const at::Tensor& targets, LayerHooks* hooks,
                      const PackedRows& rows) {
  return RunBlocks(p, idx, hooks, rows, [&](const at::Tensor& x) { return p.head_loss(x, targets); });
}

at::Tensor MeanCrossEntropy(const at::Tensor& logits, const at::Tensor& targets) {
  return at::cross_entropy_loss(logits.reshape({-1, logits.size(-1)}).to(at::kFloat), targets.reshape({-1}));
}

std::vector<at::Tensor> LossManyBlockMajor(const BlockPasses& p, const std::vector<at::Tensor>& idx,
                                           const std::vector<at::Tensor>& targets, bool training, LayerHooks* hooks,
                                           const std::vector<PackedRows>& rows) {
  TORCH_CHECK(!idx.empty() && idx.size() == targets.size(), "LossMany: ", idx.size(), " inputs for ", targets.size(),
              " targets");
  TORCH_CHECK(rows.empty() || rows.size() == idx.size(), "LossMany: ", rows.size(), " packings for ", idx.size(),
              " inputs");
  const PackedRows unpacked;
  auto rows_of = [&](size_t m) -> const PackedRows& { return rows.empty() ? unpacked : rows[m]; };
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
  each(0, [&](size_t m) { return p.embed(idx[m], rows_of(m)); });
  for (int block = 1; block <= p.n_layer; ++block) {
    each(block, [&](size_t m) { return p.run_block(block, x[m], rows_of(m)); });
  }
  const int last = p.n_layer + 1;
  each(last, [&](size_t m) {
    if (!p.recompute) return p.head_loss(x[m], targets[m]);
    // The final norm's input and output of k micro-batches are not kept either: the head
    // runs again in backward, one micro-batch at a time.
    const at::Tensor t = targets[m];
    const auto head_loss = p.head_loss;
    return RecomputedCall(
        x[m], [head_loss, t](const at::Tensor& in) { return head_loss(in, t); },
        [hooks, last] {  // `hooks` may be null: the callers' default no-op object dies with them
          if (hooks) hooks->PreForward(last);
        });
  });
  return x;
}

}  // namespace ps::models
