// RunData: a run's training and validation data as streams of model batches
// (BatchSource), whatever the data is: token windows (GPT next-token prediction, BERT
// masked LM; data/batch_sampler.h + BatchMaker), chat examples (data.format sft, padded
// or packed rows for GPT and Llama; data/sft_batcher.h) or labelled examples (BERT
// sequence classification; classification_data.h). Every input is opened and checked
// when the run starts, before anything is written.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "data/sft_batcher.h"
#include "data/sft_examples.h"
#include "data/token_source.h"
#include "models/batch.h"
#include "trainer/classification_data.h"
#include "trainer/config/config.h"

namespace ps::trainer {

// This rank's micro-batches in the run's global sample order (shuffled per epoch by
// run.seed; rank r of p takes samples [consumed + r*B, consumed + (r+1)*B) of each
// draw). The whole state is consumed_samples (checkpointed), so resume is exact. A
// sample is a token window, a labelled example, a chat example, or with data.packing a
// packed row of chat examples.
class BatchSource {
 public:
  virtual ~BatchSource() = default;
  virtual models::Batch Next(int64_t micro_batch) = 0;  // on the host
  virtual int64_t consumed_samples() const = 0;
  virtual void set_consumed_samples(int64_t n) = 0;
  virtual int64_t samples_per_epoch() const = 0;

  // What the batches Next() returned so far in this process hold (this rank's; counted
  // since the source was made: a resume neither resets nor restores them):
  //   token_slots    input slots holding a token (attention_mask 1; every slot without one),
  //   total_slots    all input slots (rows x sequence length),
  //   target_tokens  counted targets (labels != -100), what the losses average over.
  // handed_out().packing_efficiency() = token_slots / total_slots is the share of
  // non-padding slots the summary reports (1 for token windows; NaN before any batch).
  const data::SlotCounts& handed_out() const { return handed_out_; }

 protected:
  // Adds `batch` to handed_out() and returns it; every Next() returns through it.
  models::Batch Counted(models::Batch batch);

 private:
  data::SlotCounts handed_out_;
};

class RunData {
 public:
  // Throws data::DataError / ConfigError naming the file or key.
  RunData(const Config& config, int rank, int world_size);
  ~RunData();

  BatchSource& train() { return *train_; }
  bool has_valid() const { return valid_tokens_ || valid_set_ || valid_sft_; }
  // Validation batches from the start, unshuffled (the same batches every time).
  std::unique_ptr<BatchSource> Valid() const;
  // The training data, for the log; chat data adds its example and row counts and the
  // packing efficiency of an epoch (data::SftBatcher::epoch()).
  std::string description() const;
  int64_t num_tokens() const;  // of the training data

 private:
  const Config& config_;
  std::unique_ptr<data::TokenSource> train_tokens_, valid_tokens_;
  std::unique_ptr<ClassificationSet> train_set_, valid_set_;
  std::unique_ptr<data::SftExamples> train_sft_, valid_sft_;
  std::string description_;  // chat data's, made at start
  std::unique_ptr<BatchSource> train_;
};

}  // namespace ps::trainer
