// The sliced LM head (models/sliced_head.h) against the materialised one (at::linear then
// MeanCrossEntropy): loss and gradients in fp32 and under bf16 autocast, ignored targets,
// slices that do not divide the tokens, the leaf weight re-pointed before backward, each
// model's Loss against its forward's logits, and a 128k-vocabulary training step whose
// peak memory is bounded by one slice, not the whole logits.
#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <torch/autograd.h>

#include <cmath>

#include "chunkmem/memory_probe.h"
#include "models/bert.h"
#include "models/block_passes.h"
#include "models/gpt.h"
#include "models/llama.h"
#include "models/sliced_head.h"
#include "tests/catch.h"

namespace ps::models {
namespace {

// max |a - b| / max |b|: relative to the tensor's scale, so near-zero entries do not
// dominate.
double RelErr(const at::Tensor& a, const at::Tensor& b) {
  const double scale = b.abs().max().item<double>();
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>() / (scale > 0 ? scale : 1.0);
}

struct HeadResult {
  at::Tensor loss, grad_hidden, grad_weight, grad_bias;
};

// Loss and gradients of one head on fresh leaves copied from hidden, weight, bias.
// `slice_tokens` 0: the materialised head.
HeadResult RunHead(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& bias,
                   const at::Tensor& targets, int64_t slice_tokens, bool autocast = false) {
  const at::Tensor h = hidden.clone().requires_grad_(true);
  const at::Tensor w = weight.clone().requires_grad_(true);
  const at::Tensor b = bias.defined() ? bias.clone().requires_grad_(true) : at::Tensor();
  at::Tensor loss;
  {
    at::autocast::set_autocast_enabled(at::kCPU, autocast);
    at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
    loss = slice_tokens > 0 ? SlicedCrossEntropy(h, w, b, targets, slice_tokens)
                            : MeanCrossEntropy(at::linear(h, w, b), targets);
    at::autocast::set_autocast_enabled(at::kCPU, false);
    at::autocast::clear_cache();
  }
  loss.backward();
  return {loss.detach(), h.grad(), w.grad(), b.defined() ? b.grad() : at::Tensor()};
}

void CheckClose(const HeadResult& got, const HeadResult& want, double tolerance) {
  CHECK(RelErr(got.loss, want.loss) < tolerance);
  CHECK(RelErr(got.grad_hidden, want.grad_hidden) < tolerance);
  CHECK(RelErr(got.grad_weight, want.grad_weight) < tolerance);
  if (want.grad_bias.defined()) CHECK(RelErr(got.grad_bias, want.grad_bias) < tolerance);
  CHECK(got.grad_hidden.scalar_type() == want.grad_hidden.scalar_type());
  CHECK(got.grad_weight.scalar_type() == want.grad_weight.scalar_type());
}

TEST_CASE("sliced head: fp32 loss and gradients equal the materialised head's to 1e-6", "[sliced_head]") {
  at::manual_seed(1);
  const int64_t N = 50, C = 16, V = 37;
  const at::Tensor hidden = at::randn({N, C});
  const at::Tensor weight = at::randn({V, C}) * 0.5;
  const at::Tensor bias = at::randn({V});
  at::Tensor targets = at::randint(0, V, {N}, at::kLong);
  targets.index_put_({at::arange(0, N, 3)}, -100);  // every third token not counted
  for (const bool with_bias : {false, true}) {
    const at::Tensor b = with_bias ? bias : at::Tensor();
    const HeadResult want = RunHead(hidden, weight, b, targets, 0);
    for (const int64_t slice : {int64_t{1}, int64_t{7}, N, int64_t{64}}) {  // 7 does not divide 50; 64 > N
      INFO("bias " << with_bias << ", slice " << slice);
      CheckClose(RunHead(hidden, weight, b, targets, slice), want, 1e-6);
    }
  }
}

TEST_CASE("sliced head: leading dimensions, the argmax count, no gradient mode", "[sliced_head]") {
  at::manual_seed(2);
  const at::Tensor hidden = at::randn({3, 5, 8});
  const at::Tensor weight = at::randn({11, 8});
  at::Tensor targets = at::randint(0, 11, {3, 5}, at::kLong);
  targets.index_put_({0, 1}, -100);
  at::Tensor correct;
  const at::Tensor loss = SlicedCrossEntropy(hidden, weight, {}, targets, 4, &correct);
  const at::Tensor logits = at::linear(hidden, weight);
  CHECK(RelErr(loss, MeanCrossEntropy(logits, targets)) < 1e-6);
  const at::Tensor counted = targets.ne(-100);
  CHECK(correct.item<int64_t>() == logits.argmax(-1).eq(targets).logical_and(counted).sum().item<int64_t>());
  CHECK(!correct.requires_grad());
  at::NoGradGuard no_grad;
  CHECK(RelErr(SlicedCrossEntropy(hidden, weight, {}, targets, 4), loss) == 0.0);
}

TEST_CASE("sliced head: no counted token is 0 with zero gradients, where at::cross_entropy gives NaN",
          "[sliced_head]") {
  const at::Tensor hidden = at::randn({6, 4});
  const at::Tensor weight = at::randn({9, 4});
  const at::Tensor targets = at::full({6}, -100, at::kLong);
  const HeadResult want = RunHead(hidden, weight, {}, targets, 0);
  const HeadResult got = RunHead(hidden, weight, {}, targets, 4);
  CHECK(std::isnan(want.loss.item<float>()));
  CHECK(got.loss.item<float>() == 0.0f);  // a micro-batch of prompts only must not poison the step
  CHECK(got.grad_weight.abs().max().item<float>() == 0.0f);
  CHECK(got.grad_hidden.abs().max().item<float>() == 0.0f);
}

TEST_CASE("sliced head under bf16 autocast on the CPU: close to the materialised head's", "[sliced_head][bf16]") {
  // Both compute the logits in bf16 and the loss in fp32; the weight's gradient is summed
  // over slices in fp32 from bf16 products where the materialised head rounds one product.
  at::manual_seed(3);
  const int64_t N = 96, C = 32, V = 300;
  const at::Tensor hidden = at::randn({N, C});
  const at::Tensor weight = at::randn({V, C}) * 0.2;
  const at::Tensor bias = at::randn({V}) * 0.1;
  at::Tensor targets = at::randint(0, V, {N}, at::kLong);
  targets.index_put_({at::arange(0, N, 5)}, -100);
  const HeadResult want = RunHead(hidden, weight, bias, targets, 0, /*autocast=*/true);
  const HeadResult got = RunHead(hidden, weight, bias, targets, 40, /*autocast=*/true);
  CHECK(got.loss.scalar_type() == at::kFloat);
  CHECK(RelErr(got.loss, want.loss) < 1e-5);
  CHECK(RelErr(got.grad_hidden, want.grad_hidden) < 1e-2);
  CHECK(RelErr(got.grad_weight, want.grad_weight) < 1e-2);
  CHECK(RelErr(got.grad_bias, want.grad_bias) < 1e-2);
  // A bf16 weight without autocast (chunk runs): bf16 gradients, as at::linear gives.
  const HeadResult want16 = RunHead(hidden.to(at::kBFloat16), weight.to(at::kBFloat16), {}, targets, 0);
  const HeadResult got16 = RunHead(hidden.to(at::kBFloat16), weight.to(at::kBFloat16), {}, targets, 40);
  CHECK(got16.grad_weight.scalar_type() == at::kBFloat16);
  CHECK(RelErr(got16.loss, want16.loss) < 1e-5);
  CHECK(RelErr(got16.grad_hidden, want16.grad_hidden) < 1e-2);
  CHECK(RelErr(got16.grad_weight, want16.grad_weight) < 2e-2);
}

TEST_CASE("sliced head: backward reads the weight leaf's data as it is then", "[sliced_head][leaf]") {
  // The chunk runtime re-points a parameter (set_data) between forward and backward.
  const at::Tensor hidden = at::randn({10, 4}).requires_grad_(true);
  const at::Tensor weight = at::randn({7, 4}).requires_grad_(true);
  const at::Tensor targets = at::randint(0, 7, {10}, at::kLong);
  const at::Tensor loss = SlicedCrossEntropy(hidden, weight, {}, targets, 3);
  const at::Tensor original = weight.detach().clone();
  weight.set_data(at::zeros_like(original));  // released, as the runtime does
  weight.set_data(original.clone());          // bound again in another slot
  loss.backward();
  const HeadResult want = RunHead(hidden.detach(), original, {}, targets, 0);
  CHECK(RelErr(weight.grad(), want.grad_weight) < 1e-6);
  CHECK(RelErr(hidden.grad(), want.grad_hidden) < 1e-6);
}

template <typename Model>
std::vector<at::Tensor> ParameterGrads(Model& model) {
  std::vector<at::Tensor> out;
  for (const auto& p : model->BlockParameters()) out.push_back(p.tensor.grad().clone());
  model->zero_grad();
  return out;
}

// Relative to each gradient's scale; gradients that are zero in exact arithmetic (an
// attention key bias) are rounding noise of ~1e-9 in both, compared absolutely.
void CheckSameGrads(const std::vector<at::Tensor>& got, const std::vector<at::Tensor>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("parameter " << i);
    const double err = (got[i] - want[i]).abs().max().item<double>();
    CHECK(err <= 1e-5 * want[i].abs().max().item<double>() + 1e-7);
  }
}

// `model`'s Loss (the sliced head) against the cross-entropy of its forward logits:
// the loss and every parameter's gradient.
template <typename Model>
void CheckLossEqualsForward(Model& model, const at::Tensor& idx, const at::Tensor& targets) {
  const at::Tensor want = MeanCrossEntropy(model->forward(idx), targets);
  want.backward();
  const auto want_grads = ParameterGrads(model);
  const at::Tensor got = model->Loss(idx, targets);
  got.backward();
  CHECK(RelErr(got, want) < 1e-6);
  CheckSameGrads(ParameterGrads(model), want_grads);
}

TEST_CASE("GPT and Llama Loss: the sliced head equals the forward logits' cross-entropy", "[sliced_head][models]") {
  at::manual_seed(4);
  const at::Tensor idx = at::randint(0, 40, {3, 10}, at::kLong);
  at::Tensor targets = at::randint(0, 40, {3, 10}, at::kLong);
  targets.index_put_({1}, -100);
  GptConfig g;
  g.n_layer = 1, g.n_head = 2, g.n_embd = 16, g.n_positions = 16, g.vocab_size = 40, g.loss_slice_tokens = 7;
  for (const bool tied : {true, false}) {
    INFO("gpt, tied " << tied);
    g.tie_word_embeddings = tied;
    Gpt gpt(g);
    CheckLossEqualsForward(gpt, idx, targets);
  }
  LlamaConfig l;
  l.n_layer = 1, l.n_head = 2, l.n_embd = 16, l.n_positions = 16, l.vocab_size = 40, l.loss_slice_tokens = 4;
  Llama llama(l);
  CheckLossEqualsForward(llama, idx, targets);
}

TEST_CASE("BERT MLM loss: the sliced decoder (with its bias) equals the materialised one", "[sliced_head][models]") {
  at::manual_seed(5);
  BertConfig c;
  c.n_layer = 1, c.n_head = 2, c.n_embd = 16, c.vocab_size = 40, c.dropout = 0, c.attention_dropout = 0;
  c.loss_slice_tokens = 3;
  Bert bert(c);
  BertInputs in;
  in.input_ids = at::randint(0, 40, {2, 8}, at::kLong);
  at::Tensor labels = at::full({2, 8}, -100, at::kLong);
  labels.index_put_({at::indexing::Slice(), at::indexing::Slice(0, 8, 2)}, at::randint(0, 40, {2, 4}, at::kLong));
  const at::Tensor picked = labels.reshape({-1}).ne(-100).nonzero().squeeze(1);
  const at::Tensor rows = bert->Encode(in).reshape({-1, 16}).index_select(0, picked);
  const at::Tensor logits = bert->MlmLogits(rows);
  const at::Tensor want = MeanCrossEntropy(logits, labels.reshape({-1}).index_select(0, picked));
  want.backward();
  const auto want_grads = ParameterGrads(bert);
  at::Tensor correct;
  const at::Tensor got = bert->MlmLoss(in, labels, nullptr, &correct);
  got.backward();
  CHECK(RelErr(got, want) < 1e-6);
  CheckSameGrads(ParameterGrads(bert), want_grads);
  CHECK(correct.item<int64_t>() ==
        logits.argmax(-1).eq(labels.reshape({-1}).index_select(0, picked)).sum().item<int64_t>());
}

TEST_CASE("a training step with a 128k vocabulary peaks at one slice of logits, not all of them",
          "[sliced_head][memory]") {
  // 1024 tokens x 128,256 fp32 logits are 525 MB; one slice of 128 tokens, 66 MB.
  const int64_t V = 128256, C = 64, kSlice = 128;
  LlamaConfig l;
  l.n_layer = 1, l.n_head = 2, l.n_embd = C, l.n_positions = 512, l.vocab_size = V, l.loss_slice_tokens = kSlice;
  l.tie_word_embeddings = true;
  Llama llama(l);
  const at::Tensor idx = at::randint(0, V, {2, 512}, at::kLong);
  const int64_t tokens = idx.numel();
  int64_t peak = 0;
  {
    auto probe = chunkmem::MakeCpuMemoryProbe();
    llama->Loss(idx, idx).backward();
    peak = probe->TakePeakNonModelBytes();
  }
  const int64_t slice_logits = kSlice * V * 4, all_logits = tokens * V * 4, table = V * C * 4;
  // At most: one slice's fp32 logits and a temporary as large (measured: 139 MB, the
  // forward's logsumexp), the embedding table's gradients (head, lookup, their sum),
  // 8 MB of block activations.
  INFO("peak " << peak << " bytes; one slice's fp32 logits " << slice_logits << ", all " << all_logits);
  CHECK(peak < 2 * slice_logits + 3 * table + (int64_t{8} << 20));
  CHECK(peak < all_logits / 3);
}

}  // namespace
}  // namespace ps::models
