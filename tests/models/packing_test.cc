// Packed rows (data.packing; models/packed_rows.h) and the loss over masked targets:
// for a tiny random GPT and a tiny random Llama (GQA, q/k norms, Mistral's sliding
// window), the summed loss and every parameter's gradient of examples packed several to
// a row equal those of the same examples one per padded row (fp32, relative 1e-5 per
// tensor: max |packed - padded| <= 1e-5 max |padded|); with activation checkpointing and
// through LossMany (the vertical schedule) too. A micro-batch with no counted target has
// loss 0 and zero gradients (no NaN); a row of -100 among counted ones changes nothing;
// micro-batches weighted by CountedTargets give the loss of their concatenation. BERT
// refuses packed rows. Mutations seen to fail it (docs/data.md): GPT ignoring
// position_ids; the mask not confined to segments (both models).
#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <vector>

#include "models/bert.h"
#include "models/gpt.h"
#include "models/llama.h"
#include "models/trainable_models.h"
#include "tests/catch.h"

namespace ps::models {
namespace {

constexpr int64_t kVocab = 50;
constexpr int64_t kSeqLen = 16;
constexpr double kRelTol = 1e-5;

// One example: its input ids and targets (-100: not counted), one per slot.
struct Example {
  std::vector<int64_t> ids, labels;
};

// Examples of `slots` tokens with random ids and about a third of the targets masked out.
std::vector<Example> RandomExamples(const std::vector<int64_t>& slots) {
  std::vector<Example> out;
  for (int64_t n : slots) {
    const at::Tensor ids = at::randint(1, kVocab, {n + 1}, at::kLong);
    const at::Tensor counted = at::rand({n}) > 0.33;
    Example e;
    for (int64_t j = 0; j < n; ++j) {
      e.ids.push_back(ids[j].item<int64_t>());
      e.labels.push_back(counted[j].item<bool>() ? ids[j + 1].item<int64_t>() : -100);
    }
    out.push_back(e);
  }
  return out;
}

// A batch with one row per entry of `rows` (indices into `examples`), each row's examples
// back to back then padding (id 0, label -100). `packed`: position_ids restart per example
// and segment_ids number them (the padding one more); else neither is set.
Batch MakeBatch(const std::vector<Example>& examples, const std::vector<std::vector<int>>& rows, bool packed) {
  const int64_t B = static_cast<int64_t>(rows.size());
  const auto opts = at::TensorOptions().dtype(at::kLong);
  Batch b;
  b.input_ids = at::zeros({B, kSeqLen}, opts);
  b.labels = at::full({B, kSeqLen}, -100, opts);
  b.attention_mask = at::zeros({B, kSeqLen}, opts);
  at::Tensor pos = at::zeros({B, kSeqLen}, opts), seg = at::zeros({B, kSeqLen}, opts);
  for (int64_t r = 0; r < B; ++r) {
    int64_t used = 0, segment = 0;
    for (int e : rows[r]) {
      const Example& ex = examples[e];
      for (size_t j = 0; j < ex.ids.size(); ++j, ++used) {
        b.input_ids[r][used] = ex.ids[j];
        b.labels[r][used] = ex.labels[j];
        b.attention_mask[r][used] = 1;
        pos[r][used] = static_cast<int64_t>(j);
        seg[r][used] = segment;
      }
      ++segment;
    }
    for (int64_t j = used; j < kSeqLen; ++j) {
      pos[r][j] = j - used;
      seg[r][j] = segment;
    }
  }
  if (packed) {
    b.position_ids = pos;
    b.segment_ids = seg;
  }
  return b;
}

struct LossAndGrads {
  double summed_loss = 0;  // loss x counted targets: the sum over counted targets
  std::vector<at::Tensor> grads;
};

// The summed loss of `batches` (each mean times its CountedTargets) and the gradients of
// that sum, through Loss or (`many`) LossMany.
LossAndGrads Run(TrainableModel& model, const std::vector<Batch>& batches, bool many = false) {
  model.module().zero_grad();
  std::vector<at::Tensor> losses;
  if (many) {
    for (LossOutput& out : model.LossMany(batches)) losses.push_back(out.loss);
  } else {
    for (const Batch& b : batches) losses.push_back(model.Loss(b).loss);
  }
  at::Tensor sum = at::zeros({});
  for (size_t m = 0; m < batches.size(); ++m) sum = sum + losses[m] * static_cast<double>(CountedTargets(batches[m]));
  sum.backward();
  LossAndGrads out;
  out.summed_loss = sum.item<double>();
  for (const auto& p : model.BlockParameters()) {
    out.grads.push_back(p.tensor.grad().defined() ? p.tensor.grad().clone() : at::zeros_like(p.tensor));
  }
  return out;
}

// max |a - b| / max |b| over each gradient, the worst.
double WorstRelativeError(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double scale = b[i].abs().max().item<double>();
    const double diff = (a[i] - b[i]).abs().max().item<double>();
    worst = std::max(worst, scale > 0 ? diff / scale : diff);
  }
  return worst;
}

// Examples of 5, 7, 3 and 9 slots: packed {0, 1, 2} and {3} (15 and 9 of 16 slots),
// padded one per row.
const std::vector<int64_t> kSlots = {5, 7, 3, 9};
const std::vector<std::vector<int>> kPackedRows = {{0, 1, 2}, {3}};
const std::vector<std::vector<int>> kPaddedRows = {{0}, {1}, {2}, {3}};

// `vertical`: also LossMany (it needs activation checkpointing in training).
void CheckPackedEqualsPadded(TrainableModel& model, bool vertical) {
  const std::vector<Example> ex = RandomExamples(kSlots);
  const Batch packed = MakeBatch(ex, kPackedRows, true), padded = MakeBatch(ex, kPaddedRows, false);
  REQUIRE(CountedTargets(packed) == CountedTargets(padded));
  REQUIRE(CountedTargets(packed) > 0);
  const LossAndGrads p = Run(model, {packed}), u = Run(model, {padded});
  INFO("summed loss packed " << p.summed_loss << ", padded " << u.summed_loss);
  CHECK(std::abs(p.summed_loss - u.summed_loss) <= kRelTol * std::abs(u.summed_loss));
  CHECK(WorstRelativeError(p.grads, u.grads) <= kRelTol);
  if (!vertical) return;
  // The vertical schedule: two packed micro-batches through LossMany, against the padded
  // rows through Loss one micro-batch at a time.
  const Batch packed0 = MakeBatch(ex, {{0, 1, 2}}, true), packed1 = MakeBatch(ex, {{3}}, true);
  const LossAndGrads v = Run(model, {packed0, packed1}, /*many=*/true);
  CHECK(std::abs(v.summed_loss - u.summed_loss) <= kRelTol * std::abs(u.summed_loss));
  CHECK(WorstRelativeError(v.grads, u.grads) <= kRelTol);
}

GptConfig TinyGpt() {
  GptConfig c;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = 32;
  c.n_positions = kSeqLen;
  c.vocab_size = kVocab;
  return c;
}

LlamaConfig TinyLlama() {
  LlamaConfig c;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_kv_head = 2;
  c.n_embd = 32;
  c.head_dim = 16;
  c.intermediate_size = 40;
  c.n_positions = kSeqLen;
  c.vocab_size = kVocab;
  c.qk_norm = true;
  c.sliding_window = 4;  // shorter than the examples: the window applies within each
  return c;
}

TEST_CASE("packing: GPT's packed loss and gradients equal the padded rows'", "[packing][gpt]") {
  at::manual_seed(1);
  for (const bool checkpointing : {false, true}) {
    GptConfig c = TinyGpt();
    c.activation_checkpointing = checkpointing;
    auto model = MakeTrainableGpt(Gpt(c));
    model->module().train();
    CheckPackedEqualsPadded(*model, /*vertical=*/checkpointing);
  }
}

TEST_CASE("packing: Llama's packed loss and gradients equal the padded rows', sliding window included",
          "[packing][llama]") {
  at::manual_seed(2);
  for (const bool checkpointing : {false, true}) {
    LlamaConfig c = TinyLlama();
    c.activation_checkpointing = checkpointing;
    auto model = MakeTrainableLlama(Llama(c));
    model->module().train();
    CheckPackedEqualsPadded(*model, /*vertical=*/checkpointing);
  }
}

TEST_CASE("packing: each example's logits are those of the example alone (positions restart)", "[packing]") {
  at::manual_seed(3);
  Gpt gpt(TinyGpt());
  Llama llama(TinyLlama());
  gpt->eval();
  llama->eval();
  const std::vector<Example> ex = RandomExamples(kSlots);
  const Batch packed = MakeBatch(ex, kPackedRows, true);
  const Packing packing{packed.position_ids, packed.segment_ids};
  const at::Tensor gpt_packed = gpt->forward(packed.input_ids, nullptr, packing);
  const at::Tensor llama_packed = llama->forward(packed.input_ids, nullptr, packing);
  int64_t offset = 0;
  for (int e : kPackedRows[0]) {  // the first row's examples, each at its place in the row
    const int64_t n = static_cast<int64_t>(ex[e].ids.size());
    const at::Tensor alone = at::tensor(ex[e].ids, at::kLong).unsqueeze(0);
    const at::Tensor g = gpt->forward(alone), l = llama->forward(alone);
    CHECK((gpt_packed[0].narrow(0, offset, n) - g[0]).abs().max().item<double>() <= 1e-5 * g.abs().max().item<double>());
    CHECK((llama_packed[0].narrow(0, offset, n) - l[0]).abs().max().item<double>() <=
          1e-5 * l.abs().max().item<double>());
    offset += n;
  }
}

TEST_CASE("packing: Llama's rotary tables at restarted positions are each example's own", "[packing][llama]") {
  // Rotary attention depends on position differences only, so the loss test above cannot
  // tell restarted positions from running ones beyond rounding: the tables are checked here.
  const at::Tensor inv_freq = RotaryInverseFrequencies(TinyLlama());
  const at::Tensor pos = at::tensor(std::vector<int64_t>{0, 1, 2, 0, 1}, at::kLong).unsqueeze(0);
  const RotaryTables packed = MakeRotaryTablesAt(inv_freq, pos);  // [1, 1, 5, d]
  const RotaryTables three = MakeRotaryTables(inv_freq, 3, at::kCPU), two = MakeRotaryTables(inv_freq, 2, at::kCPU);
  CHECK(packed.cos[0][0].equal(at::cat({three.cos, two.cos})));
  CHECK(packed.sin[0][0].equal(at::cat({three.sin, two.sin})));
}

TEST_CASE("the sliding window's band mask: built once per micro-batch, only when a row exceeds it", "[packing][llama]") {
  const at::Tensor idx = at::zeros({2, 6}, at::kLong);
  CHECK_FALSE(MakePackedRows(Packing{}, idx, 0).attn_mask.defined());
  CHECK_FALSE(MakePackedRows(Packing{}, idx, 6).attn_mask.defined());  // the window covers the row: causal
  const at::Tensor band = MakePackedRows(Packing{}, idx, 3).attn_mask;
  REQUIRE(band.sizes() == at::IntArrayRef({1, 1, 6, 6}));
  for (int64_t i = 0; i < 6; ++i) {
    for (int64_t j = 0; j < 6; ++j) {
      CHECK(band[0][0][i][j].item<bool>() == (j <= i && j > i - 3));  // i - window < j <= i
    }
  }
  // A block asked to attend past its window without the mask refuses.
  LlamaConfig c;
  c.sliding_window = 3;
  LlamaAttention attention(c);
  const RotaryTables rope = MakeRotaryTables(RotaryInverseFrequencies(c), 6, at::kCPU);
  REQUIRE_THROWS_WITH(attention->forward(at::zeros({1, 6, c.n_embd}), rope, {}),
                      Catch::Contains("needs the sliding window's mask"));
  CHECK(attention->forward(at::zeros({1, 6, c.n_embd}), rope, band).sizes() == at::IntArrayRef({1, 6, c.n_embd}));
}

TEST_CASE("masked targets: none counted is loss 0 with zero gradients; an all -100 row changes nothing",
          "[packing][loss]") {
  at::manual_seed(4);
  for (const bool llama : {false, true}) {
    auto model = llama ? MakeTrainableLlama(Llama(TinyLlama())) : MakeTrainableGpt(Gpt(TinyGpt()));
    model->module().train();
    const std::vector<Example> ex = RandomExamples({6, 4});
    Batch none = MakeBatch(ex, {{0}, {1}}, false);
    none.labels.fill_(-100);
    const LossAndGrads z = Run(*model, {none});
    const at::Tensor loss = model->Loss(none).loss;
    CHECK(loss.item<double>() == 0.0);
    for (const at::Tensor& g : z.grads) CHECK(g.abs().max().item<double>() == 0.0);
    // A row of prompts only beside a row with targets: the mean over the counted ones.
    Batch mixed = MakeBatch(ex, {{0}, {1}}, false);
    mixed.labels[1].fill_(-100);
    const Batch first = MakeBatch(ex, {{0}}, false);
    const double a = model->Loss(mixed).loss.item<double>(), b = model->Loss(first).loss.item<double>();
    CHECK(std::isfinite(a));
    CHECK(a == Approx(b).epsilon(1e-6));
  }
}

TEST_CASE("micro-batches weighted by their counted targets give the loss of one batch of all", "[packing][loss]") {
  at::manual_seed(5);
  auto model = MakeTrainableGpt(Gpt(TinyGpt()));
  model->module().train();
  const std::vector<Example> ex = RandomExamples({5, 9, 2, 12});
  const Batch all = MakeBatch(ex, kPaddedRows, false);
  const Batch m0 = MakeBatch(ex, {{0}, {1}}, false), m1 = MakeBatch(ex, {{2}, {3}}, false);
  const double n0 = static_cast<double>(CountedTargets(m0)), n1 = static_cast<double>(CountedTargets(m1));
  const double weighted = (model->Loss(m0).loss.item<double>() * n0 + model->Loss(m1).loss.item<double>() * n1) /
                          (n0 + n1);
  CHECK(weighted == Approx(model->Loss(all).loss.item<double>()).epsilon(1e-6));
}

TEST_CASE("BERT refuses packed rows", "[packing][bert]") {
  BertConfig c;
  c.n_layer = 1;
  c.n_head = 2;
  c.n_embd = 16;
  c.intermediate_size = 32;
  c.n_positions = kSeqLen;
  c.vocab_size = kVocab;
  auto model = MakeTrainableBertMlm(Bert(c));
  const std::vector<Example> ex = RandomExamples({5, 7});
  const Batch packed = MakeBatch(ex, {{0, 1}}, true);
  CHECK_THROWS_WITH(model->Loss(packed), Catch::Contains("BERT takes no packed rows") &&
                                             Catch::Contains("data.packing is for GPT and Llama"));
}

}  // namespace
}  // namespace ps::models
