// Megatron indexed datasets (.bin + .idx): a round trip through MegatronWriter and
// OpenTokenSource, the prefix / .bin / .idx spellings of the path, and each corruption
// (magic, version, dtype, truncated .bin, size and offset mismatches, ids >= vocab)
// rejected as a DataError naming the file.
#include "data/megatron_format.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "data/data_error.h"
#include "data/token_source.h"
#include "tests/catch.h"
#include "tests/temp_dir.h"

namespace ps::data {
namespace {

std::string Prefix(const std::string& name) { return ps::testing::TempDir() + "/" + name; }

// Writes two documents {1 2 3 eot} {4 5 eot} with eot = 9; returns the prefix.
std::string WriteSmall(const std::string& name, MegatronDtype dtype = MegatronDtype::kUint16) {
  const std::string prefix = Prefix(name);
  MegatronWriter w(prefix, dtype);
  const std::vector<int32_t> a = {1, 2, 3, 9}, b = {4, 5, 9};
  w.AddDocument(a.data(), a.size());
  w.AddDocument(b.data(), b.size());
  CHECK(w.num_documents() == 2);
  CHECK(w.num_tokens() == 7);
  w.Finish();
  return prefix;
}

std::vector<int64_t> ReadAll(const TokenSource& s) {
  std::vector<int64_t> out(s.num_tokens());
  s.Read(0, s.num_tokens(), out.data());
  return out;
}

std::vector<char> Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), {});
}

void Spit(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::unique_ptr<TokenSource> Open(const std::string& path, int64_t vocab_size = 10) {
  return OpenTokenSource(DataFormat::kMegatron, path, vocab_size, 0, 0, "data.train_path");
}

TEST_CASE("megatron: written datasets read back as the concatenation of documents", "[data][megatron]") {
  const std::vector<int64_t> expected = {1, 2, 3, 9, 4, 5, 9};
  for (MegatronDtype dtype : {MegatronDtype::kUint16, MegatronDtype::kInt32, MegatronDtype::kUint8,
                              MegatronDtype::kInt64, MegatronDtype::kInt16}) {
    const std::string prefix = WriteSmall(std::string("rt_") + ToString(dtype), dtype);
    CHECK(std::filesystem::file_size(prefix + ".bin") == 7 * ElementBytes(dtype));
    CHECK(std::filesystem::file_size(prefix + ".idx") == 34 + 12 * 2 + 8 * 3);
    CHECK_FALSE(std::filesystem::exists(prefix + ".bin.tmp"));
    for (const std::string& path : {prefix, prefix + ".bin", prefix + ".idx"}) {
      auto s = Open(path);
      CHECK(ReadAll(*s) == expected);
      CHECK(s->description() == prefix + ".bin");
    }
  }
}

TEST_CASE("megatron: the index matches Megatron's layout byte for byte", "[data][megatron]") {
  const std::string prefix = WriteSmall("layout");
  const std::vector<char> idx = Slurp(prefix + ".idx");
  CHECK(std::memcmp(idx.data(), "MMIDIDX\0\0", 9) == 0);
  const auto u64 = [&](size_t at) { uint64_t v; std::memcpy(&v, idx.data() + at, 8); return v; };
  const auto i32 = [&](size_t at) { int32_t v; std::memcpy(&v, idx.data() + at, 4); return v; };
  CHECK(u64(9) == 1);     // version
  CHECK(idx[17] == 8);    // uint16
  CHECK(u64(18) == 2);    // sequences
  CHECK(u64(26) == 3);    // document indices: 0, 1, 2
  CHECK(i32(34) == 4);
  CHECK(i32(38) == 3);
  CHECK(u64(42) == 0);    // byte offsets
  CHECK(u64(50) == 8);
  CHECK(u64(58) == 0);
  CHECK(u64(66) == 1);
  CHECK(u64(74) == 2);
  const MegatronIndexInfo info = ParseMegatronIndex(reinterpret_cast<const uint8_t*>(idx.data()),
                                                    idx.size(), "x.idx", 14, "x.bin");
  CHECK(info.dtype == MegatronDtype::kUint16);
  CHECK(info.sequence_count == 2);
  CHECK(info.document_count == 2);
  CHECK(info.num_tokens == 7);
}

TEST_CASE("megatron: an abandoned writer leaves no files", "[data][megatron]") {
  const std::string prefix = Prefix("abandoned");
  {
    MegatronWriter w(prefix, MegatronDtype::kUint16);
    const std::vector<int32_t> a = {1, 2};
    w.AddDocument(a.data(), a.size());
  }
  CHECK_FALSE(std::filesystem::exists(prefix + ".bin"));
  CHECK_FALSE(std::filesystem::exists(prefix + ".bin.tmp"));
  CHECK_FALSE(std::filesystem::exists(prefix + ".idx"));
  MegatronWriter w(prefix, MegatronDtype::kUint8);
  const std::vector<int32_t> big = {300};
  CHECK_THROWS_WITH(w.AddDocument(big.data(), 1), Catch::Contains("token id 300 does not fit"));
}

// Rewrites `at` of a copy of the small dataset's .idx with `bytes`; returns the prefix.
std::string CorruptIdx(const std::string& name, size_t at, const std::vector<char>& bytes) {
  const std::string prefix = WriteSmall(name);
  std::vector<char> idx = Slurp(prefix + ".idx");
  std::memcpy(idx.data() + at, bytes.data(), bytes.size());
  Spit(prefix + ".idx", idx);
  return prefix;
}

std::vector<char> U64(uint64_t v) {
  std::vector<char> b(8);
  std::memcpy(b.data(), &v, 8);
  return b;
}

TEST_CASE("megatron: corrupt datasets are DataErrors naming the file", "[data][megatron][errors]") {
  std::string p = CorruptIdx("magic", 0, {'M', 'M', 'X'});
  CHECK_THROWS_AS(Open(p), DataError);
  CHECK_THROWS_WITH(Open(p), Catch::Contains(p + ".idx: bad magic"));

  p = CorruptIdx("version", 9, U64(2));
  CHECK_THROWS_WITH(Open(p), Catch::Contains(p + ".idx: Megatron index version 2, expected 1"));

  p = CorruptIdx("dtype_float", 17, {7});
  CHECK_THROWS_WITH(Open(p), Catch::Contains(p + ".idx: dtype code 7 (float32) cannot hold token ids"));
  p = CorruptIdx("dtype_unknown", 17, {42});
  CHECK_THROWS_WITH(Open(p), Catch::Contains(p + ".idx: unknown dtype code 42"));
  // uint8 on a uint16 .bin: the offsets no longer add up.
  p = CorruptIdx("dtype_wrong", 17, {1});
  CHECK_THROWS_WITH(Open(p), Catch::Contains(p + ".idx: sequence 1 starts at byte 8 of the .bin, expected 4"));

  p = CorruptIdx("count", 18, U64(3));
  CHECK_THROWS_WITH(Open(p), Catch::Contains(p + ".idx: header says 3 sequences and 3 document indices, more than its 82 bytes hold"));
  p = CorruptIdx("doc_count", 26, U64(2));
  CHECK_THROWS_WITH(Open(p), Catch::Contains(p + ".idx: 82 bytes, but 2 sequences and 2 document indices take 74"));
  p = CorruptIdx("count_huge", 18, U64(uint64_t{1} << 62));
  CHECK_THROWS_WITH(Open(p), Catch::Contains(p + ".idx: header says 4611686018427387904 sequences"));
  p = CorruptIdx("length", 34, {5, 0, 0, 0});  // sequence 0 claims 5 tokens
  CHECK_THROWS_WITH(Open(p), Catch::Contains(p + ".idx: sequence 1 starts at byte 8 of the .bin, expected 10"));
  p = CorruptIdx("offset", 50, U64(6));
  CHECK_THROWS_WITH(Open(p), Catch::Contains("sequence 1 starts at byte 6"));
  p = CorruptIdx("docs", 66, U64(5));
  CHECK_THROWS_WITH(Open(p), Catch::Contains(p + ".idx: document index 1 is 5"));
  p = CorruptIdx("docs_end", 74, U64(1));
  CHECK_THROWS_WITH(Open(p), Catch::Contains(p + ".idx: the documents end at sequence 1 but there are 2"));

  p = WriteSmall("truncated");
  std::vector<char> bin = Slurp(p + ".bin");
  bin.resize(bin.size() - 2);
  Spit(p + ".bin", bin);
  CHECK_THROWS_WITH(Open(p), Catch::Contains(p + ".bin: 12 bytes, but " + p + ".idx describes 2 sequences of 7 uint16 tokens (14 bytes) (truncated .bin?)"));

  p = WriteSmall("short_idx");
  std::vector<char> idx = Slurp(p + ".idx");
  idx.resize(20);
  Spit(p + ".idx", idx);
  CHECK_THROWS_WITH(Open(p), Catch::Contains(p + ".idx: 20 bytes is shorter than the 34-byte"));

  p = WriteSmall("vocab");
  CHECK_THROWS_WITH(Open(p, 9), Catch::Contains(p + ".bin: token 9 at position 3 is not < model.vocab_size 9"));
}

TEST_CASE("megatron: negative ids in signed dtypes are rejected", "[data][megatron][errors]") {
  const std::string prefix = Prefix("negative");
  MegatronWriter w(prefix, MegatronDtype::kInt32);
  const std::vector<int32_t> a = {1, -3, 2};
  w.AddDocument(a.data(), a.size());
  w.Finish();
  CHECK_THROWS_WITH(Open(prefix), Catch::Contains(prefix + ".bin: token -3 at position 1 is negative"));
}

TEST_CASE("megatron: a missing file names both files and the key", "[data][megatron][errors]") {
  const std::string p = Prefix("missing");
  CHECK_THROWS_AS(Open(p), DataError);
  CHECK_THROWS_WITH(Open(p), Catch::Contains(p + ".idx: cannot open") &&
                                 Catch::Contains("reads <prefix>.bin and <prefix>.idx") &&
                                 Catch::Contains("(data.train_path)"));
  const std::string q = WriteSmall("no_bin");
  std::filesystem::remove(q + ".bin");
  CHECK_THROWS_WITH(Open(q + ".idx"), Catch::Contains(q + ".bin: cannot open"));
}

TEST_CASE("megatron: chat data with a loss mask is refused, naming the .mask", "[data][megatron][errors]") {
  const std::string p = WriteSmall("with_mask");
  Spit(p + ".mask", std::vector<char>(7, 1));
  CHECK_THROWS_AS(Open(p), DataError);
  CHECK_THROWS_WITH(Open(p + ".bin"), Catch::Contains(p + ".mask: this is chat data") && Catch::Contains("data.format: sft") &&
                                          Catch::Contains("(data.train_path)"));
  std::filesystem::remove(p + ".mask");
  CHECK(ReadAll(*Open(p)).size() == 7);
}

}  // namespace
}  // namespace ps::data
