#include "data/token_source.h"

#include <c10/util/Exception.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "data/data_error.h"
#include "data/format_inference.h"
#include "data/mapped_file.h"
#include "data/megatron_format.h"

namespace ps::data {

const char* ToString(DataFormat f) {
  switch (f) {
    case DataFormat::kAuto: return "auto";
    case DataFormat::kSynthetic: return "synthetic";
    case DataFormat::kText: return "text";
    case DataFormat::kLlmc: return "llmc";
    case DataFormat::kRawU16: return "raw_u16";
    case DataFormat::kRawU32: return "raw_u32";
    case DataFormat::kMegatron: return "megatron";
    case DataFormat::kSft: return "sft";
    case DataFormat::kClassification: return "classification";
  }
  return "?";
}

std::optional<DataKeyProblem> ChatKeyProblem(const DataConfig& c, bool bert) {
  if (c.packing && c.format != DataFormat::kSft) {
    return DataKeyProblem{"data.packing", std::string("data.packing: true packs chat examples several to a row and "
                                                      "needs data.format: sft (data.format is ") +
                                              ToString(c.format) + ")"};
  }
  if (c.format == DataFormat::kSft && bert) {
    return DataKeyProblem{"data.format", "data.format sft trains next-token prediction on chat examples: it needs "
                                         "model.type gpt or llama, not bert"};
  }
  return std::nullopt;
}

namespace {

// Tokens of type T stored little-endian at `offset_bytes` of a mapped file.
template <typename T>
class FileTokens final : public TokenSource {
 public:
  FileTokens(std::unique_ptr<MappedFile> file, int64_t offset_bytes, int64_t count)
      : file_(std::move(file)),
        tokens_(reinterpret_cast<const T*>(file_->data() + offset_bytes)),
        count_(count) {}

  int64_t num_tokens() const override { return count_; }
  void Read(int64_t begin, int64_t count, int64_t* out) const override {
    TORCH_INTERNAL_ASSERT(begin >= 0 && begin + count <= count_);
    for (int64_t i = 0; i < count; ++i) out[i] = static_cast<int64_t>(tokens_[begin + i]);
  }
  std::string description() const override { return file_->path(); }

  // Throws naming the file and the first position whose id is >= vocab_size.
  void Validate(int64_t vocab_size) const {
    for (int64_t i = 0; i < count_; ++i) {
      const int64_t id = static_cast<int64_t>(tokens_[i]);
      PS_DATA_CHECK(id < vocab_size, file_->path(), ": token ", id, " at position ", i,
                    " is not < model.vocab_size ", vocab_size);
      PS_DATA_CHECK(id >= 0, file_->path(), ": token ", id, " at position ", i, " is negative");
    }
  }

 private:
  std::unique_ptr<MappedFile> file_;
  const T* tokens_;
  int64_t count_;
};

// SplitMix64: a stateless, well-mixed hash for random access into synthetic data.
uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

class SyntheticTokens final : public TokenSource {
 public:
  SyntheticTokens(int64_t vocab_size, uint64_t seed, int64_t count)
      : vocab_size_(vocab_size), seed_(seed), count_(count) {}
  int64_t num_tokens() const override { return count_; }
  void Read(int64_t begin, int64_t count, int64_t* out) const override {
    for (int64_t i = 0; i < count; ++i) {
      out[i] = static_cast<int64_t>(SplitMix64(seed_ * 0x100000001b3ULL + begin + i) %
                                    static_cast<uint64_t>(vocab_size_));
    }
  }
  std::string description() const override {
    return "synthetic(seed=" + std::to_string(seed_) + ")";
  }

 private:
  int64_t vocab_size_;
  uint64_t seed_;
  int64_t count_;
};

template <typename T>
std::unique_ptr<TokenSource> OpenTokens(std::unique_ptr<MappedFile> file, int64_t offset_bytes,
                                        int64_t vocab_size) {
  const int64_t payload = file->bytes() - offset_bytes;
  PS_DATA_CHECK(payload % static_cast<int64_t>(sizeof(T)) == 0, file->path(), ": ", payload,
              " data bytes is not a multiple of the ", sizeof(T), "-byte token size");
  auto src = std::make_unique<FileTokens<T>>(std::move(file), offset_bytes,
                                             payload / static_cast<int64_t>(sizeof(T)));
  src->Validate(vocab_size);
  return src;
}

std::unique_ptr<TokenSource> OpenLlmc(std::unique_ptr<MappedFile> file, int64_t vocab_size) {
  const std::string& path = file->path();
  PS_DATA_CHECK(file->bytes() >= kLlmcHeaderBytes, path, ": ", file->bytes(),
              " bytes is shorter than the 1024-byte llm.c header");
  int32_t header[3];
  std::memcpy(header, file->data(), sizeof(header));
  const int32_t magic = header[0], version = header[1];
  const int64_t count = header[2];
  int64_t token_bytes = 0;
  if (magic == kLlmcMagicGpt2) {
    PS_DATA_CHECK(version == 1, path, ": llm.c GPT-2 shard version ", version, ", expected 1");
    token_bytes = 2;
  } else if (magic == kLlmcMagicLlama3) {
    PS_DATA_CHECK(version == 7, path, ": llm.c Llama-3 shard version ", version, ", expected 7");
    token_bytes = 4;
  } else {
    PS_DATA_CHECK(false, path, ": bad llm.c magic ", magic, " (expected ", kLlmcMagicGpt2, " or ",
                kLlmcMagicLlama3, ")");
  }
  const int64_t expected = kLlmcHeaderBytes + count * token_bytes;
  PS_DATA_CHECK(file->bytes() == expected, path, ": header says ", count, " tokens (", expected,
              " bytes) but the file has ", file->bytes(), " bytes");
  if (token_bytes == 2) return OpenTokens<uint16_t>(std::move(file), kLlmcHeaderBytes, vocab_size);
  return OpenTokens<uint32_t>(std::move(file), kLlmcHeaderBytes, vocab_size);
}

// The tokens of a validated .bin in the index's dtype.
std::unique_ptr<TokenSource> OpenMegatronBin(std::unique_ptr<MappedFile> bin, MegatronDtype dtype, int64_t vocab_size) {
  switch (dtype) {
    case MegatronDtype::kUint8: return OpenTokens<uint8_t>(std::move(bin), 0, vocab_size);
    case MegatronDtype::kInt8: return OpenTokens<int8_t>(std::move(bin), 0, vocab_size);
    case MegatronDtype::kInt16: return OpenTokens<int16_t>(std::move(bin), 0, vocab_size);
    case MegatronDtype::kUint16: return OpenTokens<uint16_t>(std::move(bin), 0, vocab_size);
    case MegatronDtype::kInt32: return OpenTokens<int32_t>(std::move(bin), 0, vocab_size);
    case MegatronDtype::kInt64: return OpenTokens<int64_t>(std::move(bin), 0, vocab_size);
    case MegatronDtype::kFloat32:
    case MegatronDtype::kFloat64: break;  // rejected by ParseMegatronIndex
  }
  TORCH_INTERNAL_ASSERT(false, "unhandled Megatron dtype");
}

// data.format megatron: the sequences in order form the token stream (documents already
// end with the end-of-text token). Chat data (ps_prep --format sft) has a loss mask
// beside it: read as plain tokens, every token, the prompts included, would be trained
// on, so a .mask beside is an error pointing at data.format: sft.
std::unique_ptr<TokenSource> OpenMegatron(const std::string& path, const std::string& path_key, int64_t vocab_size) {
  const MegatronPaths paths = MegatronPathsOf(path);
  struct stat mask {};
  PS_DATA_CHECK(::stat((paths.prefix + ".mask").c_str(), &mask) != 0, paths.prefix,
                ".mask: this is chat data with a loss mask (ps_prep --format sft): set data.format: sft to train on "
                "it (only the tokens the mask marks are targets); read as megatron data every token, the prompts "
                "included, would be trained on (remove the .mask file to train on every token)", KeySuffix(path_key));
  return OpenMegatronDataset(path, vocab_size, path_key).tokens;
}

}  // namespace

MegatronDataset OpenMegatronDataset(const std::string& path, int64_t vocab_size, const std::string& path_key) {
  const MegatronPaths paths = MegatronPathsOf(path);
  for (const std::string* p : {&paths.idx_path, &paths.bin_path}) {
    struct stat st {};
    PS_DATA_CHECK(::stat(p->c_str(), &st) == 0, *p, ": cannot open: ", std::strerror(errno),
                  " (data.format megatron or sft reads <prefix>.bin and <prefix>.idx; the path '", path, "'",
                  KeySuffix(path_key), " may be the prefix or either file)");
  }
  const MappedFile idx(paths.idx_path, path_key);
  auto bin = std::make_unique<MappedFile>(paths.bin_path, path_key);
  const MegatronIndexInfo info = ParseMegatronIndex(idx.data(), idx.bytes(), idx.path(), bin->bytes(), bin->path());
  MegatronDataset out;
  out.document_starts = MegatronDocumentStarts(idx.data(), info);
  out.tokens = OpenMegatronBin(std::move(bin), info.dtype, vocab_size);
  return out;
}

std::unique_ptr<TokenSource> OpenTokenSource(DataFormat format, const std::string& path,
                                             int64_t vocab_size, uint64_t seed,
                                             int64_t synthetic_tokens, const std::string& path_key) {
  if (format == DataFormat::kAuto) {
    const std::string key = path_key.empty() ? std::string("a token file path") : path_key;
    PS_DATA_CHECK(!path.empty(), key, " is empty and data.format is not given: set a path (its format is inferred) "
                  "or data.format: synthetic for random tokens");
    format = InferDataFormat(path, key);
  }
  if (format == DataFormat::kSynthetic) {
    TORCH_CHECK(synthetic_tokens > 1, "data.synthetic_tokens must be > 1");
    return std::make_unique<SyntheticTokens>(vocab_size, seed, synthetic_tokens);
  }
  PS_DATA_CHECK(!path.empty(), path_key.empty() ? std::string("a token file path") : path_key,
                " is required for data.format ", ToString(format));
  if (format == DataFormat::kMegatron) return OpenMegatron(path, path_key, vocab_size);
  PS_DATA_CHECK(format != DataFormat::kSft, path, ": data.format sft holds chat examples (data/sft_examples.h), not "
                "a token stream");
  auto file = std::make_unique<MappedFile>(path, path_key);
  switch (format) {
    case DataFormat::kText:
      PS_DATA_CHECK(vocab_size >= 256, path, ": byte-level text needs model.vocab_size >= 256, got ",
                  vocab_size);
      return OpenTokens<uint8_t>(std::move(file), 0, vocab_size);
    case DataFormat::kLlmc:
      return OpenLlmc(std::move(file), vocab_size);
    case DataFormat::kRawU16:
      return OpenTokens<uint16_t>(std::move(file), 0, vocab_size);
    case DataFormat::kRawU32:
      return OpenTokens<uint32_t>(std::move(file), 0, vocab_size);
    case DataFormat::kMegatron:  // opened above (two files)
    case DataFormat::kSft:       // refused above
    case DataFormat::kSynthetic:
    case DataFormat::kAuto:  // resolved above
      break;
    case DataFormat::kClassification:
      PS_DATA_CHECK(false, path, ": data.format classification holds labelled examples, not a token stream");
  }
  TORCH_INTERNAL_ASSERT(false, "unhandled data format");
}

}  // namespace ps::data
