#include "trainer/run_data.h"

#include <cstdio>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "data/batch_sampler.h"
#include "data/data_error.h"
#include "data/format_inference.h"
#include "data/megatron_format.h"
#include "data/regular_file.h"
#include "data/sample_order.h"
#include "tokenizer/tokenizer.h"
#include "trainer/batch_maker.h"
#include "trainer/io/hf_io.h"

namespace ps::trainer {
namespace {

// Token windows through BatchSampler, made into the model's batches by BatchMaker.
class TokenBatches final : public BatchSource {
 public:
  TokenBatches(const data::TokenSource& source, const Config& c, bool shuffle, uint64_t seed, int rank, int world)
      : sampler_(source, c.data.seq_len, shuffle, seed, rank, world), maker_(c), rank_(rank) {}
  models::Batch Next(int64_t micro_batch) override {
    // The global index of this rank's first sample of the draw (BERT masks by it).
    const int64_t first_sample = sampler_.consumed_samples() + rank_ * micro_batch;
    return Counted(maker_.Make(sampler_.Next(micro_batch), first_sample));
  }
  int64_t consumed_samples() const override { return sampler_.consumed_samples(); }
  void set_consumed_samples(int64_t n) override { sampler_.set_consumed_samples(n); }
  int64_t samples_per_epoch() const override { return sampler_.samples_per_epoch(); }

 private:
  data::BatchSampler sampler_;
  BatchMaker maker_;
  int rank_;
};

// Labelled examples in SampleOrder.
class ClassificationBatches final : public BatchSource {
 public:
  ClassificationBatches(const ClassificationSet& set, const Config& c, bool shuffle, uint64_t seed, int rank, int world)
      : set_(set),
        order_(static_cast<int64_t>(set.examples.size()), shuffle, seed),
        seq_len_(c.data.seq_len),
        ids_(BertSpecialIds(c)),
        rank_(rank),
        world_(world) {}
  models::Batch Next(int64_t micro_batch) override {
    std::vector<int64_t> indices;
    const int64_t base = consumed_ + rank_ * micro_batch;
    for (int64_t i = 0; i < micro_batch; ++i) indices.push_back(order_.IndexOf(base + i));
    consumed_ += micro_batch * world_;
    return Counted(MakeClassificationBatch(set_, indices, seq_len_, ids_));
  }
  int64_t consumed_samples() const override { return consumed_; }
  void set_consumed_samples(int64_t n) override { consumed_ = n; }
  int64_t samples_per_epoch() const override { return order_.num_samples(); }

 private:
  const ClassificationSet& set_;
  data::SampleOrder order_;
  int64_t seq_len_;
  data::MlmSpecialIds ids_;
  int rank_, world_;
  int64_t consumed_ = 0;
};

// Chat examples through SftBatcher: one per padded row, or packed rows with their
// positions and segments (data.packing).
class SftBatches final : public BatchSource {
 public:
  SftBatches(const data::SftExamples& examples, const Config& c, bool shuffle, uint64_t seed, int rank, int world)
      : batcher_(examples, c.data.seq_len, c.data.packing, shuffle, seed, rank, world) {}
  models::Batch Next(int64_t micro_batch) override {
    data::SftBatch b = batcher_.Next(micro_batch);
    return Counted({b.input_ids, b.labels, {}, b.attention_mask, b.position_ids, b.segment_ids});
  }
  int64_t consumed_samples() const override { return batcher_.consumed_samples(); }
  void set_consumed_samples(int64_t n) override { batcher_.set_consumed_samples(n); }
  int64_t samples_per_epoch() const override { return batcher_.samples_per_epoch(); }
  const data::SftBatcher& batcher() const { return batcher_; }

 private:
  data::SftBatcher batcher_;
};

// "<prefix> (sft: N examples in R rows of T slots, packed; 93.1% of the slots hold tokens)".
std::string SftDescription(const data::SftExamples& examples, const data::SftBatcher& batcher, const Config& c) {
  char share[32];
  std::snprintf(share, sizeof(share), "%.1f%%", 100.0 * batcher.epoch().packing_efficiency());
  return examples.description() + " (sft: " + std::to_string(examples.num_examples()) + " examples in " +
         std::to_string(batcher.samples_per_epoch()) + " rows of " + std::to_string(c.data.seq_len) + " slots, " +
         (c.data.packing ? "packed" : "one per row") + "; " + share + " of the slots hold tokens, " +
         std::to_string(batcher.epoch().target_tokens) + " targets per epoch)";
}

// The files a data path stands for: the files of a Megatron prefix (and of chat data its
// .mask, when there: a missing one is OpenSftExamples' error to explain), else the path.
std::vector<std::string> DataFiles(data::DataFormat format, const std::string& path) {
  if (format != data::DataFormat::kMegatron && format != data::DataFormat::kSft) return {path};
  const data::MegatronPaths paths = data::MegatronPathsOf(path);
  std::vector<std::string> files = {paths.bin_path, paths.idx_path};
  std::error_code ec;
  if (format == data::DataFormat::kSft && std::filesystem::exists(paths.prefix + ".mask", ec)) {
    files.push_back(paths.prefix + ".mask");
  }
  return files;
}

// The run's tokenizer (data.tokenizer, else model.init_from's), checked before anything
// is read or written: it exists, every file of it is a regular file (a FIFO would hang
// the reader) and LoadTokenizer accepts the content. nullptr when the run has none.
// DataError naming the key otherwise.
std::shared_ptr<tokenizer::Tokenizer> CheckedTokenizer(const Config& c) {
  const std::string source = TokenizerSource(c);
  if (source.empty()) return nullptr;
  const std::string key = c.data.tokenizer.empty() ? "model.init_from" : "data.tokenizer";
  const std::string what = key + " '" + source + "'";
  std::error_code ec;
  if (!std::filesystem::is_directory(source, ec)) data::CheckRegularFile(source, key);
  try {
    if (std::filesystem::is_directory(source, ec)) {
      for (const char* name : {"tokenizer.json", "vocab.json", "merges.txt", "vocab.txt"}) {
        const std::filesystem::path file = std::filesystem::path(source) / name;
        if (std::filesystem::exists(file, ec)) data::CheckRegularFile(file.string(), key);
      }
    }
    return tokenizer::LoadTokenizer(source);
  } catch (const c10::Error& e) {
    PS_DATA_CHECK(false, what, " is not a usable tokenizer (a tokenizer.json, vocab.json + merges.txt, vocab.txt, "
                  "or a folder holding them): ", e.what_without_backtrace());
  }
  return nullptr;  // not reached
}

// Every data path the run reads is a regular file (after symlinks): a FIFO would block
// the reader for good. DataError naming the key.
void CheckDataPaths(const Config& c) {
  const std::pair<const char*, const std::string*> paths[] = {{"data.train_path", &c.data.train_path},
                                                               {"data.valid_path", &c.data.valid_path}};
  for (const auto& [key, path] : paths) {
    if (path->empty() || c.data.format == data::DataFormat::kSynthetic) continue;
    // kAuto only in a Config built in code (the loader resolves it); inference reads the
    // head of regular files only.
    const data::DataFormat format =
        c.data.format == data::DataFormat::kAuto ? data::InferDataFormat(*path, key) : c.data.format;
    for (const std::string& file : DataFiles(format, *path)) data::CheckRegularFile(file, key);
  }
}

// Text to ids: the run's tokenizer (data.tokenizer or model.init_from), else bytes.
TextEncoder MakeEncoder(const Config& c, std::shared_ptr<tokenizer::Tokenizer> tok) {
  const std::string source = TokenizerSource(c);
  const int64_t vocab = c.model.vocab_size;
  if (!tok) {
    return [](const std::string& text) {
      std::vector<int64_t> ids;
      for (unsigned char ch : text) ids.push_back(ch);
      return ids;
    };
  }
  return [tok, vocab, source](const std::string& text) {
    std::vector<int64_t> ids;
    for (int32_t id : tok->Encode(text)) {
      PS_DATA_CHECK(id < vocab, source, ": token id ", id, " is not below model.vocab_size ", vocab);
      ids.push_back(id);
    }
    return ids;
  };
}

}  // namespace

RunData::RunData(const Config& c, int rank, int world_size) : config_(c) {
  const auto seed = static_cast<uint64_t>(c.run.seed);
  CheckDataPaths(c);
  std::shared_ptr<tokenizer::Tokenizer> tok = CheckedTokenizer(c);
  if (c.data.format == data::DataFormat::kClassification) {
    const TextEncoder encode = MakeEncoder(c, tok);
    PS_DATA_CHECK(!c.data.train_path.empty(), "data.train_path is required for data.format classification");
    train_set_ = std::make_unique<ClassificationSet>(ReadClassificationSet(c.data.train_path, c.bert.num_labels, encode));
    if (!c.data.valid_path.empty()) {
      valid_set_ = std::make_unique<ClassificationSet>(ReadClassificationSet(c.data.valid_path, c.bert.num_labels, encode));
    }
    train_ = std::make_unique<ClassificationBatches>(*train_set_, c, c.data.shuffle, seed, rank, world_size);
    return;
  }
  if (c.data.format == data::DataFormat::kSft) {
    train_sft_ = data::OpenSftExamples(c.data.train_path, c.model.vocab_size, "data.train_path");
    if (!c.data.valid_path.empty()) {
      valid_sft_ = data::OpenSftExamples(c.data.valid_path, c.model.vocab_size, "data.valid_path");
      SftBatches check(*valid_sft_, c, /*shuffle=*/false, 0, 0, 1);  // throws when no example has a target slot
    }
    auto train = std::make_unique<SftBatches>(*train_sft_, c, c.data.shuffle, seed, rank, world_size);
    description_ = SftDescription(*train_sft_, train->batcher(), c);
    train_ = std::move(train);
    return;
  }
  train_tokens_ = data::OpenTokenSource(c.data.format, c.data.train_path, c.model.vocab_size, seed,
                                        c.data.synthetic_tokens, "data.train_path");
  if (c.data.format == data::DataFormat::kSynthetic) {
    valid_tokens_ = data::OpenTokenSource(c.data.format, "", c.model.vocab_size, seed + 1, c.data.synthetic_tokens);
  } else if (!c.data.valid_path.empty()) {
    valid_tokens_ = data::OpenTokenSource(c.data.format, c.data.valid_path, c.model.vocab_size, 0, 0, "data.valid_path");
  }
  train_ = std::make_unique<TokenBatches>(*train_tokens_, c, c.data.shuffle, seed, rank, world_size);
  if (valid_tokens_) data::BatchSampler check(*valid_tokens_, c.data.seq_len, /*shuffle=*/false, 0);
}

RunData::~RunData() = default;

models::Batch BatchSource::Counted(models::Batch batch) {
  const int64_t slots = batch.input_ids.numel();
  handed_out_.total_slots += slots;
  handed_out_.token_slots += batch.attention_mask.defined() ? batch.attention_mask.sum().item<int64_t>() : slots;
  handed_out_.target_tokens += models::CountedTargets(batch);
  return batch;
}

std::unique_ptr<BatchSource> RunData::Valid() const {
  if (valid_set_) return std::make_unique<ClassificationBatches>(*valid_set_, config_, false, 0, 0, 1);
  if (valid_sft_) return std::make_unique<SftBatches>(*valid_sft_, config_, false, 0, 0, 1);
  return std::make_unique<TokenBatches>(*valid_tokens_, config_, false, 0, 0, 1);
}

std::string RunData::description() const {
  if (train_sft_) return description_;
  if (train_set_) return train_set_->path + " (" + std::to_string(train_set_->examples.size()) + " labelled examples)";
  return train_tokens_->description();
}

int64_t RunData::num_tokens() const {
  if (train_sft_) return train_sft_->num_tokens();
  return train_set_ ? train_set_->num_tokens : train_tokens_->num_tokens();
}

}  // namespace ps::trainer
