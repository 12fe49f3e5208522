#include "data/sft_batcher.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <limits>

#include "data/data_error.h"

namespace ps::data {

namespace {
constexpr int64_t kIgnoredLabel = -100;
}  // namespace

double SlotCounts::packing_efficiency() const {
  if (total_slots == 0) return std::numeric_limits<double>::quiet_NaN();
  return static_cast<double>(token_slots) / static_cast<double>(total_slots);
}

SftBatcher::SftBatcher(const SftExamples& examples, int64_t seq_len, bool packing, bool shuffle, uint64_t seed,
                       int rank, int world_size)
    : examples_(examples),
      seq_len_(seq_len),
      packing_(packing),
      rank_(rank),
      world_size_(world_size),
      ids_buf_(seq_len + 1),
      mask_buf_(seq_len + 1) {
  TORCH_CHECK(seq_len > 0, "data.seq_len must be > 0");
  TORCH_CHECK(rank >= 0 && rank < world_size, "rank ", rank, " not in [0, ", world_size, ")");
  const int64_t n = examples.num_examples();
  int64_t samples = n;
  if (packing_) {  // greedy, in file order
    int64_t used = 0;
    for (int64_t e = 0; e < n; ++e) {
      const int64_t slots = SlotsOf(e);
      if (e == 0 || used + slots > seq_len_) {
        row_first_.push_back(e);
        used = 0;
      }
      used += slots;
    }
    row_first_.push_back(n);
    samples = static_cast<int64_t>(row_first_.size()) - 1;
  }
  for (int64_t e = 0; e < n; ++e) {
    const int64_t slots = SlotsOf(e);
    epoch_.token_slots += slots;
    if (slots == 0) continue;
    examples_.Read(e, slots + 1, ids_buf_.data(), mask_buf_.data());
    epoch_.target_tokens += std::count(mask_buf_.begin() + 1, mask_buf_.begin() + slots + 1, uint8_t{1});
  }
  epoch_.total_slots = samples * seq_len_;
  PS_DATA_CHECK(epoch_.token_slots > 0, examples.description(), ": none of its ", n,
                " examples has two tokens (an input and its target)");
  PS_DATA_CHECK(epoch_.target_tokens > 0, examples.description(), ": none of its ", n, " examples has a trained token ",
                "within their first ", seq_len_, " (data.seq_len): every assistant turn, or every 1 of the mask, lies ",
                "beyond it; raise data.seq_len, or check the mask (ps_prep --format sft trains the assistant turns)");
  order_ = std::make_unique<SampleOrder>(samples, shuffle, seed);
}

int64_t SftBatcher::SlotsOf(int64_t e) const { return std::min(std::max<int64_t>(examples_.length(e) - 1, 0), seq_len_); }

int64_t SftBatcher::Place(int64_t e, int64_t row, int64_t offset, int64_t segment, int64_t* ids, int64_t* labels,
                          int64_t* attn, int64_t* pos, int64_t* seg) const {
  const int64_t slots = std::min(SlotsOf(e), seq_len_ - offset);
  if (slots == 0) return 0;
  examples_.Read(e, slots + 1, ids_buf_.data(), mask_buf_.data());
  const int64_t base = row * seq_len_ + offset;
  for (int64_t j = 0; j < slots; ++j) {
    ids[base + j] = ids_buf_[j];
    labels[base + j] = mask_buf_[j + 1] ? ids_buf_[j + 1] : kIgnoredLabel;
    attn[base + j] = 1;
    if (pos) pos[base + j] = j;
    if (seg) seg[base + j] = segment;
  }
  return slots;
}

SftBatch SftBatcher::Next(int64_t micro_batch) {
  const auto opts = at::TensorOptions().dtype(at::kLong);
  SftBatch b;
  b.input_ids = at::zeros({micro_batch, seq_len_}, opts);
  b.labels = at::full({micro_batch, seq_len_}, kIgnoredLabel, opts);
  b.attention_mask = at::zeros({micro_batch, seq_len_}, opts);
  if (packing_) {
    b.position_ids = at::empty({micro_batch, seq_len_}, opts);
    b.segment_ids = at::empty({micro_batch, seq_len_}, opts);
  }
  int64_t* ids = b.input_ids.data_ptr<int64_t>();
  int64_t* labels = b.labels.data_ptr<int64_t>();
  int64_t* attn = b.attention_mask.data_ptr<int64_t>();
  int64_t* pos = packing_ ? b.position_ids.data_ptr<int64_t>() : nullptr;
  int64_t* seg = packing_ ? b.segment_ids.data_ptr<int64_t>() : nullptr;
  const int64_t base = consumed_samples_ + static_cast<int64_t>(rank_) * micro_batch;
  for (int64_t i = 0; i < micro_batch; ++i) {
    const int64_t sample = order_->IndexOf(base + i);
    const int64_t first = packing_ ? row_first_[sample] : sample;
    const int64_t end = packing_ ? row_first_[sample + 1] : sample + 1;
    int64_t used = 0;
    for (int64_t e = first; e < end; ++e) {
      used += Place(e, i, used, e - first, ids, labels, attn, pos, seg);
    }
    for (int64_t j = used; packing_ && j < seq_len_; ++j) {  // padding: a segment of its own
      pos[i * seq_len_ + j] = j - used;
      seg[i * seq_len_ + j] = end - first;
    }
  }
  consumed_samples_ += micro_batch * world_size_;
  handed_out_.total_slots += micro_batch * seq_len_;
  handed_out_.token_slots += b.attention_mask.sum().item<int64_t>();
  handed_out_.target_tokens += b.labels.ne(kIgnoredLabel).sum().item<int64_t>();
  return b;
}

}  // namespace ps::data
