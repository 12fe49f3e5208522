#include "data/megatron_format.h"

#include <c10/util/Exception.h>

#include <cerrno>
#include <cstring>
#include <limits>

#include "data/data_error.h"

namespace ps::data {

const char* ToString(MegatronDtype dtype) {
  switch (dtype) {
    case MegatronDtype::kUint8: return "uint8";
    case MegatronDtype::kInt8: return "int8";
    case MegatronDtype::kInt16: return "int16";
    case MegatronDtype::kInt32: return "int32";
    case MegatronDtype::kInt64: return "int64";
    case MegatronDtype::kFloat64: return "float64";
    case MegatronDtype::kFloat32: return "float32";
    case MegatronDtype::kUint16: return "uint16";
  }
  return "?";
}

int64_t ElementBytes(MegatronDtype dtype) {
  switch (dtype) {
    case MegatronDtype::kUint8:
    case MegatronDtype::kInt8: return 1;
    case MegatronDtype::kInt16:
    case MegatronDtype::kUint16: return 2;
    case MegatronDtype::kInt32:
    case MegatronDtype::kFloat32: return 4;
    case MegatronDtype::kInt64:
    case MegatronDtype::kFloat64: return 8;
  }
  TORCH_INTERNAL_ASSERT(false, "unknown MegatronDtype ", static_cast<int>(dtype));
}

MegatronDtype MegatronDtypeForVocab(int64_t vocab_size) {
  return vocab_size < 65500 ? MegatronDtype::kUint16 : MegatronDtype::kInt32;
}

namespace {

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

template <typename T>
T Load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

}  // namespace

MegatronPaths MegatronPathsOf(const std::string& path) {
  std::string prefix = path;
  if (EndsWith(path, ".bin") || EndsWith(path, ".idx")) prefix = path.substr(0, path.size() - 4);
  return {prefix, prefix + ".bin", prefix + ".idx"};
}

MegatronIndexInfo ParseMegatronIndex(const uint8_t* idx, int64_t idx_bytes,
                                     const std::string& idx_path, int64_t bin_bytes,
                                     const std::string& bin_path) {
  PS_DATA_CHECK(idx_bytes >= kMegatronHeaderBytes, idx_path, ": ", idx_bytes,
                " bytes is shorter than the 34-byte Megatron index header");
  PS_DATA_CHECK(std::memcmp(idx, kMegatronMagic, sizeof(kMegatronMagic)) == 0, idx_path,
                ": bad magic (expected \"MMIDIDX\\0\\0\"): not a Megatron .idx file");
  const uint64_t version = Load<uint64_t>(idx + 9);
  PS_DATA_CHECK(version == kMegatronVersion, idx_path, ": Megatron index version ", version,
                ", expected 1");
  const uint8_t code = idx[17];
  MegatronIndexInfo info;
  switch (code) {
    case 1: case 2: case 3: case 4: case 5: case 8:
      info.dtype = static_cast<MegatronDtype>(code);
      break;
    case 6: case 7:
      PS_DATA_CHECK(false, idx_path, ": dtype code ", int{code}, " (",
                    ToString(static_cast<MegatronDtype>(code)), ") cannot hold token ids");
    default:
      PS_DATA_CHECK(false, idx_path, ": unknown dtype code ", int{code},
                    " (Megatron codes: 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 8 uint16)");
  }
  const uint64_t s = Load<uint64_t>(idx + 18);
  const uint64_t d = Load<uint64_t>(idx + 26);
  const uint64_t room = static_cast<uint64_t>(idx_bytes - kMegatronHeaderBytes);
  // 12 bytes per sequence and 8 per document index; compared before multiplying (no overflow).
  PS_DATA_CHECK(s <= room / 12 && d <= room / 8 && 12 * s + 8 * d <= room, idx_path, ": header says ",
                s, " sequences and ", d, " document indices, more than its ", idx_bytes,
                " bytes hold (truncated index?)");
  const int64_t num_seq = static_cast<int64_t>(s), num_doc_idx = static_cast<int64_t>(d);
  const int64_t expected = kMegatronHeaderBytes + 12 * num_seq + 8 * num_doc_idx;
  PS_DATA_CHECK(idx_bytes == expected || idx_bytes == expected + num_seq, idx_path, ": ", idx_bytes,
                " bytes, but ", num_seq, " sequences and ", num_doc_idx, " document indices take ",
                expected, " (or ", expected + num_seq, " with multimodal modes)");
  PS_DATA_CHECK(num_seq > 0, idx_path, ": holds no sequences (no tokens)");

  const int64_t elem = ElementBytes(info.dtype);
  const uint8_t* lengths = idx + kMegatronHeaderBytes;
  const uint8_t* offsets = lengths + 4 * num_seq;
  const uint8_t* doc_indices = offsets + 8 * num_seq;
  int64_t next_offset = 0;  // bytes: where sequence i must start
  for (int64_t i = 0; i < num_seq; ++i) {
    const int32_t len = Load<int32_t>(lengths + 4 * i);
    const int64_t off = Load<int64_t>(offsets + 8 * i);
    PS_DATA_CHECK(len >= 0, idx_path, ": sequence ", i, " has negative length ", len);
    PS_DATA_CHECK(off == next_offset, idx_path, ": sequence ", i, " starts at byte ", off,
                  " of the .bin, expected ", next_offset,
                  " (sequences must lie back to back, in order, from byte 0)");
    next_offset += len * elem;
  }
  PS_DATA_CHECK(next_offset == bin_bytes, bin_path, ": ", bin_bytes, " bytes, but ", idx_path,
                " describes ", num_seq, " sequences of ", next_offset / elem, " ", ToString(info.dtype),
                " tokens (", next_offset, " bytes)",
                bin_bytes < next_offset ? " (truncated .bin?)" : "");
  PS_DATA_CHECK(num_doc_idx >= 1 && Load<int64_t>(doc_indices) == 0, idx_path,
                ": document indices must start with 0");
  int64_t prev = 0;
  for (int64_t j = 1; j < num_doc_idx; ++j) {
    const int64_t end = Load<int64_t>(doc_indices + 8 * j);
    PS_DATA_CHECK(end >= prev && end <= num_seq, idx_path, ": document index ", j, " is ", end,
                  "; must be in [", prev, ", ", num_seq, "] (ascending sequence indices)");
    prev = end;
  }
  PS_DATA_CHECK(prev == num_seq, idx_path, ": the documents end at sequence ", prev, " but there are ",
                num_seq, " sequences");
  info.sequence_count = num_seq;
  info.document_count = num_doc_idx - 1;
  info.num_tokens = bin_bytes / elem;
  return info;
}

std::vector<int64_t> MegatronDocumentStarts(const uint8_t* idx, const MegatronIndexInfo& info) {
  const int64_t num_seq = info.sequence_count, num_docs = info.document_count;
  const uint8_t* lengths = idx + kMegatronHeaderBytes;
  const uint8_t* doc_indices = lengths + 12 * num_seq;  // after the lengths and the offsets
  std::vector<int64_t> sequence_starts(num_seq + 1, 0);   // token offsets
  for (int64_t i = 0; i < num_seq; ++i) sequence_starts[i + 1] = sequence_starts[i] + Load<int32_t>(lengths + 4 * i);
  std::vector<int64_t> starts(num_docs + 1);
  for (int64_t d = 0; d <= num_docs; ++d) starts[d] = sequence_starts[Load<int64_t>(doc_indices + 8 * d)];
  return starts;
}

namespace {

// Converts ids to T into `out`; an id that T cannot hold is an error naming `path`.
template <typename T>
void ConvertIds(const int32_t* ids, int64_t num_ids, std::vector<uint8_t>* out,
                const std::string& path) {
  out->resize(num_ids * sizeof(T));
  T* dst = reinterpret_cast<T*>(out->data());
  for (int64_t i = 0; i < num_ids; ++i) {
    const int64_t id = ids[i];
    TORCH_CHECK(id >= static_cast<int64_t>(std::numeric_limits<T>::min()) &&
                    id <= static_cast<int64_t>(std::numeric_limits<T>::max()),
                path, ": token id ", id, " does not fit the dataset's dtype");
    dst[i] = static_cast<T>(id);
  }
}

void WriteAll(std::FILE* f, const void* data, size_t bytes, const std::string& path) {
  TORCH_CHECK(bytes == 0 || std::fwrite(data, 1, bytes, f) == bytes, path,
              ": write failed: ", std::strerror(errno));
}

void CloseChecked(std::FILE* f, const std::string& path) {
  const bool ok = std::ferror(f) == 0;
  const int rc = std::fclose(f);
  TORCH_CHECK(ok && rc == 0, path, ": write failed: ", std::strerror(errno));
}

}  // namespace

MegatronWriter::MegatronWriter(const std::string& prefix, MegatronDtype dtype)
    : paths_{prefix, prefix + ".bin", prefix + ".idx"}, dtype_(dtype) {
  TORCH_CHECK(dtype != MegatronDtype::kFloat32 && dtype != MegatronDtype::kFloat64,
              "MegatronWriter: ", ToString(dtype), " cannot hold token ids");
  const std::string tmp = paths_.bin_path + ".tmp";
  bin_ = std::fopen(tmp.c_str(), "wb");
  TORCH_CHECK(bin_ != nullptr, tmp, ": cannot create: ", std::strerror(errno));
}

MegatronWriter::~MegatronWriter() {
  if (finished_) return;
  if (bin_) std::fclose(bin_);
  std::remove((paths_.bin_path + ".tmp").c_str());
  std::remove((paths_.idx_path + ".tmp").c_str());
}

void MegatronWriter::AddDocument(const int32_t* ids, int64_t num_ids) {
  TORCH_CHECK(!finished_ && bin_, "MegatronWriter::AddDocument after Finish");
  TORCH_CHECK(num_ids <= std::numeric_limits<int32_t>::max(), paths_.bin_path, ": a document of ",
              num_ids, " tokens exceeds the int32 sequence length of the format");
  switch (dtype_) {
    case MegatronDtype::kUint8: ConvertIds<uint8_t>(ids, num_ids, &buffer_, paths_.bin_path); break;
    case MegatronDtype::kInt8: ConvertIds<int8_t>(ids, num_ids, &buffer_, paths_.bin_path); break;
    case MegatronDtype::kInt16: ConvertIds<int16_t>(ids, num_ids, &buffer_, paths_.bin_path); break;
    case MegatronDtype::kUint16: ConvertIds<uint16_t>(ids, num_ids, &buffer_, paths_.bin_path); break;
    case MegatronDtype::kInt32: ConvertIds<int32_t>(ids, num_ids, &buffer_, paths_.bin_path); break;
    case MegatronDtype::kInt64: ConvertIds<int64_t>(ids, num_ids, &buffer_, paths_.bin_path); break;
    case MegatronDtype::kFloat32:
    case MegatronDtype::kFloat64: TORCH_INTERNAL_ASSERT(false, "float dtype in MegatronWriter");
  }
  WriteAll(bin_, buffer_.data(), buffer_.size(), paths_.bin_path + ".tmp");
  sequence_lengths_.push_back(static_cast<int32_t>(num_ids));
  num_tokens_ += num_ids;
}

void MegatronWriter::Finish() {
  Close();
  Commit();
}

void MegatronWriter::Close() {
  TORCH_CHECK(!closed_ && bin_, "MegatronWriter::Close called twice");
  const std::string bin_tmp = paths_.bin_path + ".tmp", idx_tmp = paths_.idx_path + ".tmp";
  std::FILE* bin = bin_;
  bin_ = nullptr;
  CloseChecked(bin, bin_tmp);

  std::FILE* idx = std::fopen(idx_tmp.c_str(), "wb");
  TORCH_CHECK(idx != nullptr, idx_tmp, ": cannot create: ", std::strerror(errno));
  const uint64_t version = kMegatronVersion;
  const uint8_t code = static_cast<uint8_t>(dtype_);
  const uint64_t s = sequence_lengths_.size(), d = s + 1;
  WriteAll(idx, kMegatronMagic, sizeof(kMegatronMagic), idx_tmp);
  WriteAll(idx, &version, 8, idx_tmp);
  WriteAll(idx, &code, 1, idx_tmp);
  WriteAll(idx, &s, 8, idx_tmp);
  WriteAll(idx, &d, 8, idx_tmp);
  WriteAll(idx, sequence_lengths_.data(), 4 * s, idx_tmp);
  std::vector<int64_t> column(s);  // sequence offsets in bytes, then document indices
  int64_t offset_bytes = 0;
  for (uint64_t i = 0; i < s; ++i) {
    column[i] = offset_bytes;
    offset_bytes += sequence_lengths_[i] * ElementBytes(dtype_);
  }
  WriteAll(idx, column.data(), 8 * s, idx_tmp);
  column.resize(d);
  for (uint64_t j = 0; j < d; ++j) column[j] = static_cast<int64_t>(j);
  WriteAll(idx, column.data(), 8 * d, idx_tmp);
  CloseChecked(idx, idx_tmp);
  closed_ = true;
}

void MegatronWriter::Commit() {
  TORCH_CHECK(closed_ && !finished_, "MegatronWriter::Commit without Close, or twice");
  const std::string bin_tmp = paths_.bin_path + ".tmp", idx_tmp = paths_.idx_path + ".tmp";
  TORCH_CHECK(std::rename(bin_tmp.c_str(), paths_.bin_path.c_str()) == 0, paths_.bin_path,
              ": cannot rename from ", bin_tmp, ": ", std::strerror(errno));
  TORCH_CHECK(std::rename(idx_tmp.c_str(), paths_.idx_path.c_str()) == 0, paths_.idx_path,
              ": cannot rename from ", idx_tmp, ": ", std::strerror(errno));
  finished_ = true;
}

}  // namespace ps::data
