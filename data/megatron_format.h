// Megatron-LM indexed dataset (megatron/core/datasets/indexed_dataset.py): `<prefix>.bin`
// holds the token arrays of all sequences back to back, `<prefix>.idx` their lengths,
// byte offsets and the document boundaries. Little-endian throughout:
//
//   offset 0   magic "MMIDIDX\0\0" (9 bytes)     offset 26  uint64 document_count (D)
//   offset 9   uint64 version = 1                offset 34  int32[S] sequence lengths (tokens)
//   offset 17  uint8 dtype code                  ...        int64[S] sequence offsets (bytes)
//   offset 18  uint64 sequence_count (S)         ...        int64[D] document indices
//
// The document indices start at 0 and then hold the end sequence index of each document,
// so a file of n documents has D = n + 1 (Megatron's own convention). A multimodal index
// adds int8[S] modes, which are accepted and ignored.
//
// ParseMegatronIndex validates an index against its .bin (used by OpenTokenSource);
// MegatronWriter writes a pair (used by ps_prep and the tests). Both are free of state
// shared between objects; one writer belongs to one thread.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace ps::data {

// Megatron's DType codes. The float codes exist in the format but cannot hold token ids.
enum class MegatronDtype : uint8_t {
  kUint8 = 1,
  kInt8 = 2,
  kInt16 = 3,
  kInt32 = 4,
  kInt64 = 5,
  kFloat64 = 6,
  kFloat32 = 7,
  kUint16 = 8,
};
const char* ToString(MegatronDtype dtype);
int64_t ElementBytes(MegatronDtype dtype);
// What Megatron's preprocess_data.py picks (DType.optimal_dtype): uint16 when the vocabulary
// is below 65 500 ids, else int32.
MegatronDtype MegatronDtypeForVocab(int64_t vocab_size);

constexpr char kMegatronMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr uint64_t kMegatronVersion = 1;
constexpr int64_t kMegatronHeaderBytes = 34;

// The two files of a dataset. `path` may be the prefix or either file's path (ending in
// .bin or .idx); the others are derived from it.
struct MegatronPaths {
  std::string prefix;
  std::string bin_path;
  std::string idx_path;
};
MegatronPaths MegatronPathsOf(const std::string& path);

struct MegatronIndexInfo {
  MegatronDtype dtype = MegatronDtype::kUint16;
  int64_t sequence_count = 0;
  int64_t document_count = 0;  // documents: the document indices minus their leading 0
  int64_t num_tokens = 0;      // all sequences together = bin_bytes / ElementBytes(dtype)
};

// Checks the `idx_bytes` bytes of an index (magic, version, integer dtype, counts against
// the file size, non-negative lengths, offsets contiguous from 0 in sequence order, document
// indices ascending from 0 to S) and that the sequences fill exactly `bin_bytes`. Any
// inconsistency is a DataError naming `idx_path` (or `bin_path` for the size mismatch).
MegatronIndexInfo ParseMegatronIndex(const uint8_t* idx, int64_t idx_bytes,
                                     const std::string& idx_path, int64_t bin_bytes,
                                     const std::string& bin_path);

// Where each document of an index that passed ParseMegatronIndex (`info` is what it
// returned) starts in the token stream, plus the end: [document_count + 1] ascending
// token offsets, document d being tokens [starts[d], starts[d + 1]) (the concatenation of
// its sequences). data.format sft reads each document as one example.
std::vector<int64_t> MegatronDocumentStarts(const uint8_t* idx, const MegatronIndexInfo& info);

// Writes `<prefix>.bin` and `<prefix>.idx`, one sequence per document (GPT style). Files are
// written under a ".tmp" name and renamed by Finish(), so a failed or abandoned run leaves
// no half-written dataset; the destructor removes what an unfinished writer wrote.
// I/O failures and ids that do not fit `dtype` are c10::Errors naming the file.
class MegatronWriter {
 public:
  MegatronWriter(const std::string& prefix, MegatronDtype dtype);
  ~MegatronWriter();
  MegatronWriter(const MegatronWriter&) = delete;
  MegatronWriter& operator=(const MegatronWriter&) = delete;

  // Appends one document of `num_ids` ids (the caller appends the end-of-text id).
  void AddDocument(const int32_t* ids, int64_t num_ids);
  // Writes the index and renames both files into place: Close(), then Commit().
  void Finish();
  // Writes the index; both files complete under their ".tmp" names, nothing in place yet.
  void Close();
  // Renames both files into place (after Close): where several writers make one dataset,
  // each is closed before any is committed, so a failed write leaves the old one whole.
  void Commit();

  int64_t num_documents() const { return static_cast<int64_t>(sequence_lengths_.size()); }
  int64_t num_tokens() const { return num_tokens_; }
  const MegatronPaths& paths() const { return paths_; }

 private:
  MegatronPaths paths_;
  MegatronDtype dtype_;
  std::FILE* bin_ = nullptr;
  std::vector<int32_t> sequence_lengths_;  // [S]
  std::vector<uint8_t> buffer_;            // one document converted to dtype_
  int64_t num_tokens_ = 0;
  bool closed_ = false;
  bool finished_ = false;  // committed
};

}  // namespace ps::data
