// Dynamic MLM masking: the 15% / 80-10-10 recipe holds in distribution, [CLS]/[SEP]/[PAD]
// are never chosen, labels are the original ids exactly where chosen, and a sample is
// masked identically wherever it is drawn (batch position, batch size, call), but
// differently for another sample or seed.
#include <ATen/ATen.h>

#include "data/mlm_masking.h"
// Last: c10 headers define a glog-style CHECK that Catch must override.
#include "tests/catch.h"

namespace ps::data {
namespace {

constexpr int64_t kVocab = 1000;
const MlmSpecialIds kIds{/*cls=*/2, /*sep=*/3, /*mask=*/4, /*pad=*/0};

at::Tensor Windows(int64_t rows, int64_t cols) { return at::randint(5, kVocab, {rows, cols}, at::kLong); }

TEST_CASE("MLM masking follows the 15% and 80/10/10 recipe and never touches special tokens") {
  at::manual_seed(0);
  const at::Tensor windows = Windows(64, 126);
  const BertBatch b = MakeMlmBatch(windows, 128, /*first_sample=*/1000, /*seed=*/7, kVocab, kIds);
  CHECK(b.input_ids.sizes() == at::IntArrayRef({64, 128}));
  CHECK(at::all(b.input_ids.select(1, 0) == kIds.cls).item<bool>());
  CHECK(at::all(b.input_ids.select(1, 127) == kIds.sep).item<bool>());
  CHECK(at::all(b.labels.select(1, 0) == -100).item<bool>());
  CHECK(at::all(b.labels.select(1, 127) == -100).item<bool>());
  const at::Tensor original = windows.narrow(1, 0, 126);
  const at::Tensor chosen = b.labels.narrow(1, 1, 126).ne(-100);
  const double n = static_cast<double>(original.numel());
  const double picked = chosen.sum().item<double>();
  CHECK(picked / n == Approx(0.15).margin(0.01));
  // Labels are the original ids where chosen; unchosen tokens are unchanged.
  CHECK(at::equal(b.labels.narrow(1, 1, 126).masked_select(chosen), original.masked_select(chosen)));
  CHECK(at::equal(b.input_ids.narrow(1, 1, 126).masked_select(~chosen), original.masked_select(~chosen)));
  const at::Tensor now = b.input_ids.narrow(1, 1, 126).masked_select(chosen);
  const at::Tensor was = original.masked_select(chosen);
  const double masked = (now == kIds.mask).sum().item<double>() / picked;
  const double kept = (now == was).sum().item<double>() / picked;
  CHECK(masked == Approx(0.8).margin(0.03));
  CHECK(kept == Approx(0.1 + 0.1 / kVocab).margin(0.03));  // 10% kept, plus random draws of the same id
  CHECK(1.0 - masked - kept == Approx(0.1).margin(0.03));

  // Special tokens inside a window (packed documents) are never chosen.
  at::Tensor with_specials = at::full({4, 30}, kIds.sep, at::kLong);
  with_specials.narrow(1, 0, 10).fill_(kIds.pad);
  const BertBatch s = MakeMlmBatch(with_specials, 32, 0, 7, kVocab, kIds);
  CHECK(at::all(s.labels == -100).item<bool>());
}

TEST_CASE("a sample is masked the same wherever it is drawn, and differently elsewhere") {
  at::manual_seed(1);
  const at::Tensor windows = Windows(8, 62);
  const BertBatch all = MakeMlmBatch(windows, 64, 40, 9, kVocab, kIds);
  // Rows 3..5 drawn alone (as another rank or micro-batch would) mask the same way.
  const BertBatch part = MakeMlmBatch(windows.narrow(0, 3, 3), 64, 43, 9, kVocab, kIds);
  CHECK(at::equal(part.input_ids, all.input_ids.narrow(0, 3, 3)));
  CHECK(at::equal(part.labels, all.labels.narrow(0, 3, 3)));
  // Another sample index or seed masks differently.
  CHECK_FALSE(at::equal(MakeMlmBatch(windows, 64, 41, 9, kVocab, kIds).labels, all.labels));
  CHECK_FALSE(at::equal(MakeMlmBatch(windows, 64, 40, 10, kVocab, kIds).labels, all.labels));
}

TEST_CASE("MLM batches reject missing special ids and too short sequences") {
  const at::Tensor w = Windows(1, 10);
  CHECK_THROWS_WITH(MakeMlmBatch(w, 12, 0, 1, kVocab, MlmSpecialIds{2, 3, -1, 0}), Catch::Contains("[MASK] id -1"));
  CHECK_THROWS_WITH(MakeMlmBatch(w, 2, 0, 1, kVocab, kIds), Catch::Contains("data.seq_len must be >= 3"));
  CHECK_THROWS_WITH(MakeMlmBatch(w, 20, 0, 1, kVocab, kIds), Catch::Contains("shorter than data.seq_len - 2"));
}

}  // namespace
}  // namespace ps::data
