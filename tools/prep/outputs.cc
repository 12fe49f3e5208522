#include "tools/prep/outputs.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "data/megatron_format.h"
#include "data/token_source.h"

namespace ps::prep {
namespace {

class MegatronSplitWriter final : public SplitWriter {
 public:
  MegatronSplitWriter(const std::string& prefix, int64_t vocab_size)
      : dtype_(data::MegatronDtypeForVocab(vocab_size)), writer_(prefix, dtype_) {}
  void AddDocument(const std::vector<int32_t>& ids, const std::vector<uint8_t>& mask) override {
    writer_.AddDocument(ids.data(), static_cast<int64_t>(ids.size()));
  }
  void Close() override { writer_.Close(); }
  void Commit() override { writer_.Commit(); }
  int64_t num_documents() const override { return writer_.num_documents(); }
  int64_t num_tokens() const override { return writer_.num_tokens(); }
  std::vector<std::string> files() const override {
    return {writer_.paths().bin_path, writer_.paths().idx_path};
  }
  std::string dtype() const override { return data::ToString(dtype_); }

 private:
  data::MegatronDtype dtype_;
  data::MegatronWriter writer_;
};

// An llm.c shard (dev/data/data_common.py): 256 x int32 header {magic, version, count},
// then uint16 ids (GPT-2 magic) or uint32 ids (Llama-3 magic) when they do not fit 16 bits.
// Written as "<path>.tmp", renamed by Commit(); removed if never committed.
class LlmcSplitWriter final : public SplitWriter {
 public:
  LlmcSplitWriter(const std::string& path, int64_t vocab_size)
      : path_(path), tmp_(path + ".tmp"), wide_(vocab_size > 65536) {
    file_ = std::fopen(tmp_.c_str(), "wb");
    TORCH_CHECK(file_ != nullptr, tmp_, ": cannot create: ", std::strerror(errno));
    const std::vector<int32_t> header(256, 0);  // written for real by Finish()
    Write(header.data(), data::kLlmcHeaderBytes);
  }
  ~LlmcSplitWriter() override {
    if (file_ != nullptr) std::fclose(file_);
    if (!committed_) std::remove(tmp_.c_str());
  }
  void AddDocument(const std::vector<int32_t>& ids, const std::vector<uint8_t>& mask) override;
  void Close() override;
  void Commit() override {
    TORCH_CHECK(std::rename(tmp_.c_str(), path_.c_str()) == 0, path_, ": cannot rename from ", tmp_, ": ",
                std::strerror(errno));
    committed_ = true;
  }
  int64_t num_documents() const override { return num_documents_; }
  int64_t num_tokens() const override { return num_tokens_; }
  std::vector<std::string> files() const override { return {path_}; }
  std::string dtype() const override { return wide_ ? "uint32" : "uint16"; }

 private:
  void Write(const void* data, size_t bytes) {
    TORCH_CHECK(bytes == 0 || std::fwrite(data, 1, bytes, file_) == bytes, tmp_,
                ": write failed: ", std::strerror(errno));
  }

  std::string path_, tmp_;
  bool wide_;
  bool committed_ = false;
  std::FILE* file_ = nullptr;
  std::vector<uint16_t> narrow_;
  int64_t num_tokens_ = 0, num_documents_ = 0;
};

void LlmcSplitWriter::AddDocument(const std::vector<int32_t>& ids, const std::vector<uint8_t>& mask) {
  TORCH_CHECK(num_tokens_ + static_cast<int64_t>(ids.size()) <= INT32_MAX, path_,
              ": an llm.c shard holds at most 2^31 - 1 tokens (int32 count); use --format megatron");
  if (wide_) {
    Write(ids.data(), 4 * ids.size());
  } else {
    narrow_.assign(ids.begin(), ids.end());
    Write(narrow_.data(), 2 * narrow_.size());
  }
  num_tokens_ += static_cast<int64_t>(ids.size());
  ++num_documents_;
}

void LlmcSplitWriter::Close() {
  std::vector<int32_t> header(256, 0);
  header[0] = wide_ ? data::kLlmcMagicLlama3 : data::kLlmcMagicGpt2;
  header[1] = wide_ ? 7 : 1;
  header[2] = static_cast<int32_t>(num_tokens_);
  TORCH_CHECK(std::fseek(file_, 0, SEEK_SET) == 0, tmp_, ": seek failed: ", std::strerror(errno));
  Write(header.data(), data::kLlmcHeaderBytes);
  const bool ok = std::ferror(file_) == 0;
  const int rc = std::fclose(file_);
  file_ = nullptr;
  TORCH_CHECK(ok && rc == 0, tmp_, ": write failed: ", std::strerror(errno));
}

// Megatron .bin/.idx plus <prefix>.mask: one uint8 per token of the .bin, in order (no
// header). Written as "<path>.tmp", renamed by Commit(); removed if never committed.
class SftSplitWriter final : public SplitWriter {
 public:
  SftSplitWriter(const std::string& prefix, int64_t vocab_size)
      : tokens_(prefix, vocab_size), path_(prefix + ".mask"), tmp_(path_ + ".tmp") {
    file_ = std::fopen(tmp_.c_str(), "wb");
    TORCH_CHECK(file_ != nullptr, tmp_, ": cannot create: ", std::strerror(errno));
  }
  ~SftSplitWriter() override {
    if (file_ != nullptr) std::fclose(file_);
    if (!committed_) std::remove(tmp_.c_str());
  }
  void AddDocument(const std::vector<int32_t>& ids, const std::vector<uint8_t>& mask) override {
    TORCH_INTERNAL_ASSERT(mask.size() == ids.size(), "sft: a mask of ", mask.size(), " for ", ids.size(), " tokens");
    TORCH_CHECK(mask.empty() || std::fwrite(mask.data(), 1, mask.size(), file_) == mask.size(), tmp_,
                ": write failed: ", std::strerror(errno));
    tokens_.AddDocument(ids, mask);
  }
  void Close() override {
    const bool ok = std::ferror(file_) == 0;
    const int rc = std::fclose(file_);
    file_ = nullptr;
    TORCH_CHECK(ok && rc == 0, tmp_, ": write failed: ", std::strerror(errno));
    tokens_.Close();
  }
  void Commit() override {
    tokens_.Commit();
    TORCH_CHECK(std::rename(tmp_.c_str(), path_.c_str()) == 0, path_, ": cannot rename from ", tmp_, ": ",
                std::strerror(errno));
    committed_ = true;
  }
  int64_t num_documents() const override { return tokens_.num_documents(); }
  int64_t num_tokens() const override { return tokens_.num_tokens(); }
  std::vector<std::string> files() const override {
    std::vector<std::string> out = tokens_.files();
    out.push_back(path_);
    return out;
  }
  std::string dtype() const override { return tokens_.dtype(); }

 private:
  MegatronSplitWriter tokens_;
  std::string path_, tmp_;
  std::FILE* file_ = nullptr;
  bool committed_ = false;
};

}  // namespace

int64_t ValidCount(const Options& opt, int64_t num_docs) {
  if (opt.valid_docs >= 0) return std::min(opt.valid_docs, num_docs > 0 ? num_docs - 1 : 0);
  if (opt.valid_fraction <= 0 || num_docs < 2) return 0;
  const int64_t k = static_cast<int64_t>(std::llround(opt.valid_fraction * num_docs));
  return std::clamp<int64_t>(k, 1, num_docs - 1);
}

std::vector<std::string> OutputPaths(const Options& opt) {
  std::vector<std::string> out;
  for (const char* split : {"train", "valid"}) {
    const std::string name = opt.output_prefix + "_" + split;
    std::vector<std::string> files = {name + ".bin"};
    if (opt.format != OutputFormat::kLlmc) files.push_back(name + ".idx");
    if (opt.format == OutputFormat::kSft) files.push_back(name + ".mask");
    for (const std::string& f : files) {
      out.push_back(f);
      out.push_back(f + ".tmp");
    }
  }
  return out;
}

std::unique_ptr<SplitWriter> MakeWriter(const Options& opt, const std::string& split, int64_t vocab_size) {
  const std::string name = opt.output_prefix + "_" + split;
  if (opt.format == OutputFormat::kLlmc) return std::make_unique<LlmcSplitWriter>(name + ".bin", vocab_size);
  if (opt.format == OutputFormat::kSft) return std::make_unique<SftSplitWriter>(name, vocab_size);
  return std::make_unique<MegatronSplitWriter>(name, vocab_size);
}

}  // namespace ps::prep
