#include "trainer/run_data.h"

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
#include "trainer/hf_io.h"

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
    return maker_.Make(sampler_.Next(micro_batch), first_sample);
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
    return MakeClassificationBatch(set_, indices, seq_len_, ids_);
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

// The files a data path stands for: both files of a Megatron prefix, else the path.
std::vector<std::string> DataFiles(data::DataFormat format, const std::string& path) {
  if (format != data::DataFormat::kMegatron) return {path};
  const data::MegatronPaths paths = data::MegatronPathsOf(path);
  return {paths.bin_path, paths.idx_path};
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

std::unique_ptr<BatchSource> RunData::Valid() const {
  if (valid_set_) return std::make_unique<ClassificationBatches>(*valid_set_, config_, false, 0, 0, 1);
  return std::make_unique<TokenBatches>(*valid_tokens_, config_, false, 0, 0, 1);
}

std::string RunData::description() const {
  if (train_set_) return train_set_->path + " (" + std::to_string(train_set_->examples.size()) + " labelled examples)";
  return train_tokens_->description();
}

int64_t RunData::num_tokens() const { return train_set_ ? train_set_->num_tokens : train_tokens_->num_tokens(); }

}  // namespace ps::trainer
