#include "data/format_inference.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <vector>

#include "data/data_error.h"
#include "data/megatron_format.h"
#include "data/regular_file.h"
#include "data/token_source.h"

namespace ps::data {
namespace {

constexpr size_t kSniffBytes = 4096;

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool Exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

// Whether `bytes` is UTF-8 without NUL; a multi-byte character cut by the end of the
// window counts as valid when `truncated`.
bool LooksLikeText(const std::vector<uint8_t>& bytes, bool truncated) {
  size_t i = 0;
  while (i < bytes.size()) {
    const uint8_t b = bytes[i];
    if (b == 0) return false;
    size_t extra = 0;
    if (b < 0x80) extra = 0;
    else if ((b & 0xE0) == 0xC0 && b >= 0xC2) extra = 1;
    else if ((b & 0xF0) == 0xE0) extra = 2;
    else if ((b & 0xF8) == 0xF0 && b <= 0xF4) extra = 3;
    else return false;
    if (i + extra >= bytes.size() && extra > 0) return truncated;
    for (size_t k = 1; k <= extra; ++k) {
      if ((bytes[i + k] & 0xC0) != 0x80) return false;
    }
    i += extra + 1;
  }
  return true;
}

}  // namespace

DataFormat InferDataFormat(const std::string& path, const std::string& key) {
  PS_DATA_CHECK(!path.empty(), key, " is empty: no data to infer data.format from");
  const std::string where = path + " (" + key + ")";
  const MegatronPaths megatron = MegatronPathsOf(path);
  if (Exists(megatron.bin_path) && Exists(megatron.idx_path)) {
    return Exists(megatron.prefix + ".mask") ? DataFormat::kSft : DataFormat::kMegatron;
  }

  const int fd = OpenRegularFile(path, key);
  std::vector<uint8_t> head(kSniffBytes);
  ssize_t got = 0;
  size_t filled = 0;
  while (filled < head.size() && (got = ::read(fd, head.data() + filled, head.size() - filled)) > 0) {
    filled += static_cast<size_t>(got);
  }
  const int err = errno;
  struct stat st {};
  ::fstat(fd, &st);
  ::close(fd);
  PS_DATA_CHECK(got >= 0, path, ": read failed: ", std::strerror(err), " (", key, ")");
  head.resize(filled);
  PS_DATA_CHECK(!head.empty(), where, ": is empty (0 bytes): nothing to train on");

  if (head.size() >= 4) {
    int32_t magic = 0;
    std::memcpy(&magic, head.data(), sizeof(magic));
    if (magic == kLlmcMagicGpt2 || magic == kLlmcMagicLlama3) return DataFormat::kLlmc;
  }
  if (EndsWith(path, ".jsonl") || EndsWith(path, ".json") || EndsWith(path, ".tsv")) {
    return DataFormat::kClassification;  // what ReadClassificationSet reads (trainer/classification_data.h)
  }
  if (EndsWith(path, ".bin") || EndsWith(path, ".idx")) {
    PS_DATA_CHECK(false, where, ": cannot infer data.format: not an llm.c shard (no header) and no Megatron pair (",
                  megatron.bin_path, " + ", megatron.idx_path,
                  "); for headerless token ids set data.format: raw_u16 or raw_u32");
  }
  const bool truncated = static_cast<int64_t>(head.size()) < static_cast<int64_t>(st.st_size);
  PS_DATA_CHECK(LooksLikeText(head, truncated), where,
                ": cannot infer data.format: binary content (not UTF-8 text, not an llm.c shard, no Megatron "
                ".bin/.idx pair); set data.format (text, llmc, raw_u16, raw_u32, megatron)");
  return DataFormat::kText;
}

}  // namespace ps::data
