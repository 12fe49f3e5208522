// RunData: a run's training and validation data as streams of model batches
// (BatchSource), whatever the data is: token windows (GPT next-token prediction, BERT
// masked LM; data/batch_sampler.h + BatchMaker) or labelled examples (BERT sequence
// classification; classification_data.h). Every input is opened and checked when the
// run starts, before anything is written.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "data/token_source.h"
#include "models/trainable.h"
#include "trainer/classification_data.h"
#include "trainer/config.h"

namespace ps::trainer {

// This rank's micro-batches in the run's global sample order (shuffled per epoch by
// run.seed; rank r of p takes samples [consumed + r*B, consumed + (r+1)*B) of each
// draw). The whole state is consumed_samples (checkpointed), so resume is exact.
class BatchSource {
 public:
  virtual ~BatchSource() = default;
  virtual models::Batch Next(int64_t micro_batch) = 0;  // on the host
  virtual int64_t consumed_samples() const = 0;
  virtual void set_consumed_samples(int64_t n) = 0;
  virtual int64_t samples_per_epoch() const = 0;
};

class RunData {
 public:
  // Throws data::DataError / ConfigError naming the file or key.
  RunData(const Config& config, int rank, int world_size);
  ~RunData();

  BatchSource& train() { return *train_; }
  bool has_valid() const { return valid_tokens_ || valid_set_; }
  // Validation batches from the start, unshuffled (the same batches every time).
  std::unique_ptr<BatchSource> Valid() const;
  std::string description() const;  // the training data, for the log
  int64_t num_tokens() const;        // of the training data

 private:
  const Config& config_;
  std::unique_ptr<data::TokenSource> train_tokens_, valid_tokens_;
  std::unique_ptr<ClassificationSet> train_set_, valid_set_;
  std::unique_ptr<BatchSource> train_;
};

}  // namespace ps::trainer
