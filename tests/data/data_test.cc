// Token sources (llm.c shards, raw, text, synthetic) on good and corrupt files, and
// the batch sampler: determinism, epoch coverage, rank sharding, exact resume. Bad
// data is a DataError naming the file (ps_train exits 2 on it).
#include <ATen/ATen.h>
#include <sys/stat.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <vector>

#include "data/batch_sampler.h"
#include "data/data_error.h"
#include "data/format_inference.h"
#include "data/regular_file.h"
#include "data/token_source.h"
#include "tests/catch.h"

namespace ps::data {
namespace {

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name;
}

template <typename T>
std::string WriteLlmc(const std::string& name, int32_t magic, int32_t version, const std::vector<T>& tokens,
                      int32_t header_count) {
  const std::string path = TempPath(name);
  std::vector<int32_t> header(256, 0);
  header[0] = magic;
  header[1] = version;
  header[2] = header_count;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(header.data()), 1024);
  out.write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * sizeof(T)));
  return path;
}

std::vector<int64_t> ReadAll(const TokenSource& s) {
  std::vector<int64_t> out(s.num_tokens());
  s.Read(0, s.num_tokens(), out.data());
  return out;
}

TEST_CASE("llm.c GPT-2 and Llama-3 shards read back", "[data][llmc]") {
  const std::vector<uint16_t> t16 = {1, 2, 50256, 7};
  auto s = OpenTokenSource(DataFormat::kLlmc, WriteLlmc("gpt2.bin", kLlmcMagicGpt2, 1, t16, 4), 50257, 0, 0);
  CHECK(ReadAll(*s) == std::vector<int64_t>{1, 2, 50256, 7});
  const std::vector<uint32_t> t32 = {100000, 3, 128000};
  auto l = OpenTokenSource(DataFormat::kLlmc, WriteLlmc("llama.bin", kLlmcMagicLlama3, 7, t32, 3), 128256, 0, 0);
  CHECK(ReadAll(*l) == std::vector<int64_t>{100000, 3, 128000});
}

TEST_CASE("corrupt llm.c shards are rejected naming the file", "[data][llmc]") {
  const std::vector<uint16_t> t = {1, 2, 3};
  std::string p = WriteLlmc("magic.bin", 12345, 1, t, 3);
  CHECK_THROWS_WITH(OpenTokenSource(DataFormat::kLlmc, p, 100, 0, 0), Catch::Contains(p + ": bad llm.c magic 12345"));
  p = WriteLlmc("version.bin", kLlmcMagicGpt2, 2, t, 3);
  CHECK_THROWS_WITH(OpenTokenSource(DataFormat::kLlmc, p, 100, 0, 0), Catch::Contains("version 2, expected 1"));
  p = WriteLlmc("count.bin", kLlmcMagicGpt2, 1, t, 5);
  CHECK_THROWS_WITH(OpenTokenSource(DataFormat::kLlmc, p, 100, 0, 0),
                    Catch::Contains(p + ": header says 5 tokens (1034 bytes) but the file has 1030 bytes"));
  p = WriteLlmc("vocab.bin", kLlmcMagicGpt2, 1, std::vector<uint16_t>{1, 200, 3}, 3);
  CHECK_THROWS_WITH(OpenTokenSource(DataFormat::kLlmc, p, 100, 0, 0),
                    Catch::Contains(p + ": token 200 at position 1 is not < model.vocab_size 100"));
  const std::string short_path = TempPath("short.bin");
  std::ofstream(short_path) << "tiny";
  CHECK_THROWS_WITH(OpenTokenSource(DataFormat::kLlmc, short_path, 100, 0, 0),
                    Catch::Contains("shorter than the 1024-byte llm.c header"));
  CHECK_THROWS_WITH(OpenTokenSource(DataFormat::kLlmc, TempPath("nope.bin"), 100, 0, 0),
                    Catch::Contains("cannot open"));
}

TEST_CASE("raw token files: sizes and ids are validated", "[data][raw]") {
  const std::string p = TempPath("raw.bin");
  const std::vector<uint16_t> t = {5, 6, 7};
  std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(t.data()), 6);
  CHECK(ReadAll(*OpenTokenSource(DataFormat::kRawU16, p, 10, 0, 0)) == std::vector<int64_t>{5, 6, 7});
  CHECK_THROWS_WITH(OpenTokenSource(DataFormat::kRawU32, p, 10, 0, 0),
                    Catch::Contains("6 data bytes is not a multiple of the 4-byte token size"));
  CHECK_THROWS_WITH(OpenTokenSource(DataFormat::kRawU16, p, 6, 0, 0), Catch::Contains("token 6 at position 1"));
}

TEST_CASE("text files are byte tokens", "[data][text]") {
  const std::string p = TempPath("t.txt");
  std::ofstream(p) << "hi!";
  CHECK(ReadAll(*OpenTokenSource(DataFormat::kText, p, 256, 0, 0)) == std::vector<int64_t>{'h', 'i', '!'});
  CHECK_THROWS_WITH(OpenTokenSource(DataFormat::kText, p, 100, 0, 0), Catch::Contains("needs model.vocab_size >= 256"));
}

TEST_CASE("paths that cannot be token files are DataErrors naming the path and its key", "[data][errors]") {
  const std::string dir = TempPath("a_dir");
  std::filesystem::create_directories(dir);
  CHECK_THROWS_AS(OpenTokenSource(DataFormat::kText, dir, 256, 0, 0, "data.train_path"), DataError);
  CHECK_THROWS_WITH(OpenTokenSource(DataFormat::kText, dir, 256, 0, 0, "data.train_path"),
                    dir + ": is a directory, not a regular file (data.train_path)");
  const std::string empty = TempPath("empty.bin");
  std::ofstream(empty, std::ios::trunc).flush();
  for (DataFormat f : {DataFormat::kText, DataFormat::kLlmc, DataFormat::kRawU16, DataFormat::kRawU32}) {
    INFO(ToString(f));
    CHECK_THROWS_WITH(OpenTokenSource(f, empty, 256, 0, 0, "data.valid_path"),
                      empty + ": is empty (0 bytes, no tokens) (data.valid_path)");
  }
  CHECK_THROWS_WITH(OpenTokenSource(DataFormat::kText, "/dev/null", 256, 0, 0, "data.train_path"),
                    "/dev/null: is a character device, not a regular file (data.train_path)");
  CHECK_THROWS_WITH(OpenTokenSource(DataFormat::kText, TempPath("nope.txt"), 256, 0, 0, "data.valid_path"),
                    TempPath("nope.txt") + ": cannot open: No such file or directory (data.valid_path)");
  CHECK_THROWS_WITH(OpenTokenSource(DataFormat::kText, "", 256, 0, 0, "data.train_path"),
                    "data.train_path is required for data.format text");
  // Without a key the message names the path alone.
  CHECK_THROWS_WITH(OpenTokenSource(DataFormat::kText, dir, 256, 0, 0), dir + ": is a directory, not a regular file");
}

TEST_CASE("a FIFO is refused without blocking, in every format and through a symlink", "[data][errors]") {
  const std::string fifo = TempPath("tokens.fifo");
  std::filesystem::remove(fifo);
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  const std::string link = TempPath("tokens_link.bin");
  std::filesystem::remove(link);
  std::filesystem::create_symlink(fifo, link);
  for (DataFormat f : {DataFormat::kAuto, DataFormat::kText, DataFormat::kLlmc, DataFormat::kRawU16, DataFormat::kRawU32}) {
    INFO(ToString(f));
    // Before: open(2) waited for a writer that never came.
    CHECK_THROWS_WITH(OpenTokenSource(f, fifo, 256, 0, 0, "data.train_path"),
                      fifo + ": is a FIFO (named pipe), not a regular file (data.train_path)");
    CHECK_THROWS_WITH(OpenTokenSource(f, link, 256, 0, 0, "data.valid_path"),
                      link + ": is a FIFO (named pipe), not a regular file (data.valid_path)");
  }
  CHECK_THROWS_AS(CheckRegularFile(fifo, "data.tokenizer"), DataError);
  CHECK_NOTHROW(CheckRegularFile(TempPath("t.txt"), "data.train_path"));
}

TEST_CASE("data.format auto is inferred from the file; what cannot be inferred is an error", "[data][infer]") {
  const std::string text = TempPath("infer_text.txt");
  std::ofstream(text) << "hello \xc3\xa9t\xc3\xa9";
  CHECK(InferDataFormat(text, "data.train_path") == DataFormat::kText);
  CHECK(ReadAll(*OpenTokenSource(DataFormat::kAuto, text, 256, 0, 0, "data.train_path")).size() == 11);
  const std::string shard = WriteLlmc("infer.bin", kLlmcMagicGpt2, 1, std::vector<uint16_t>{1, 2, 3}, 3);
  CHECK(InferDataFormat(shard, "data.train_path") == DataFormat::kLlmc);
  CHECK(ReadAll(*OpenTokenSource(DataFormat::kAuto, shard, 100, 0, 0)) == std::vector<int64_t>{1, 2, 3});
  std::ofstream(TempPath("pair.bin")) << "x";
  std::ofstream(TempPath("pair.idx")) << "y";
  for (const char* p : {"pair", "pair.bin", "pair.idx"}) CHECK(InferDataFormat(TempPath(p), "k") == DataFormat::kMegatron);
  std::ofstream(TempPath("labels.tsv")) << "a\t1\n";
  CHECK(InferDataFormat(TempPath("labels.tsv"), "k") == DataFormat::kClassification);
  // A multi-byte character cut by the 4 KiB window is still text.
  const std::string cut = TempPath("cut.txt");
  std::ofstream(cut) << std::string(4095, 'a') << "\xc3\xa9";
  CHECK(InferDataFormat(cut, "k") == DataFormat::kText);
  // Headerless ids, binary content, bad UTF-8, an empty path: errors naming the key.
  const std::string raw = TempPath("raw_ids.bin");
  std::ofstream(raw, std::ios::binary) << std::string("\x05\x00\x06\x00", 4);
  CHECK_THROWS_WITH(InferDataFormat(raw, "data.train_path"),
                    Catch::StartsWith(raw + " (data.train_path): cannot infer data.format: not an llm.c shard") &&
                        Catch::Contains("set data.format: raw_u16 or raw_u32"));
  const std::string latin1 = TempPath("latin1.txt");
  std::ofstream(latin1) << "caf\xe9 au lait";
  CHECK_THROWS_WITH(InferDataFormat(latin1, "data.valid_path"),
                    Catch::StartsWith(latin1 + " (data.valid_path): cannot infer data.format: binary content"));
  CHECK_THROWS_WITH(OpenTokenSource(DataFormat::kAuto, "", 256, 0, 0, "data.train_path"),
                    Catch::StartsWith("data.train_path is empty and data.format is not given"));
}

TEST_CASE("bad file contents are DataErrors too", "[data][errors]") {
  const std::string p = TempPath("contents.txt");
  std::ofstream(p) << "hi!";
  CHECK_THROWS_AS(OpenTokenSource(DataFormat::kText, p, 100, 0, 0), DataError);   // vocab < 256 for bytes
  CHECK_THROWS_AS(OpenTokenSource(DataFormat::kRawU16, p, 100, 0, 0), DataError);  // 3 bytes, 2-byte tokens
  CHECK_THROWS_AS(OpenTokenSource(DataFormat::kLlmc, p, 100, 0, 0), DataError);    // shorter than the header
  CHECK_THROWS_AS(OpenTokenSource(DataFormat::kLlmc, WriteLlmc("m.bin", 7, 1, std::vector<uint16_t>{1}, 1), 100, 0, 0),
                  DataError);
  const std::string ids = TempPath("ids.bin");
  const std::vector<uint16_t> t = {5, 6, 7};
  std::ofstream(ids, std::ios::binary).write(reinterpret_cast<const char*>(t.data()), 6);
  CHECK_THROWS_AS(OpenTokenSource(DataFormat::kRawU16, ids, 6, 0, 0), DataError);  // id >= vocab
}

TEST_CASE("synthetic tokens are deterministic by seed and within the vocabulary", "[data][synthetic]") {
  auto a = ReadAll(*OpenTokenSource(DataFormat::kSynthetic, "", 37, 1, 1000));
  auto b = ReadAll(*OpenTokenSource(DataFormat::kSynthetic, "", 37, 1, 1000));
  auto c = ReadAll(*OpenTokenSource(DataFormat::kSynthetic, "", 37, 2, 1000));
  CHECK(a == b);
  CHECK(a != c);
  std::set<int64_t> distinct(a.begin(), a.end());
  CHECK(distinct.size() == 37);
  CHECK(*distinct.rbegin() == 36);
}

std::unique_ptr<TokenSource> Counting(int64_t n) {
  // Token i of a raw u32 file is i: samples can be identified by their first token.
  const std::string p = TempPath("count_" + std::to_string(n) + ".bin");
  std::vector<uint32_t> t(n);
  for (int64_t i = 0; i < n; ++i) t[i] = static_cast<uint32_t>(i);
  std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(t.data()), n * 4);
  return OpenTokenSource(DataFormat::kRawU32, p, n, 0, 0);
}

std::vector<int64_t> Starts(const at::Tensor& batch) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < batch.size(0); ++i) out.push_back(batch[i][0].item<int64_t>());
  return out;
}

TEST_CASE("samples are seq_len + 1 tokens; each epoch visits every sample once", "[data][sampler]") {
  auto src = Counting(41);  // (41 - 1) / 4 = 10 samples of 5 tokens
  BatchSampler s(*src, 4, /*shuffle=*/true, 9);
  REQUIRE(s.samples_per_epoch() == 10);
  auto batch = s.Next(10);
  CHECK(batch.sizes() == at::IntArrayRef({10, 5}));
  CHECK(at::equal(batch.select(1, 4) - batch.select(1, 0), at::full({10}, 4, at::kLong)));
  auto starts = Starts(batch);
  CHECK(std::set<int64_t>(starts.begin(), starts.end()).size() == 10);
  CHECK(starts != std::vector<int64_t>{0, 4, 8, 12, 16, 20, 24, 28, 32, 36});  // shuffled
  auto next_epoch = Starts(s.Next(10));
  CHECK(std::set<int64_t>(next_epoch.begin(), next_epoch.end()).size() == 10);
  CHECK(next_epoch != starts);  // a new permutation
  BatchSampler plain(*src, 4, /*shuffle=*/false, 9);
  CHECK(Starts(plain.Next(3)) == std::vector<int64_t>{0, 4, 8});
}

TEST_CASE("ranks get disjoint shards of the same global stream", "[data][sampler]") {
  auto src = Counting(401);
  BatchSampler single(*src, 4, true, 5, 0, 1);
  BatchSampler r0(*src, 4, true, 5, 0, 2), r1(*src, 4, true, 5, 1, 2);
  for (int step = 0; step < 5; ++step) {
    auto all = Starts(single.Next(6));
    auto a = Starts(r0.Next(3)), b = Starts(r1.Next(3));
    a.insert(a.end(), b.begin(), b.end());
    CHECK(a == all);
  }
  CHECK(r0.consumed_samples() == 30);
}

TEST_CASE("resuming from consumed_samples continues exactly", "[data][sampler]") {
  auto src = Counting(401);
  BatchSampler a(*src, 4, true, 11);
  for (int i = 0; i < 7; ++i) a.Next(4);  // crosses into the second epoch (100 samples)
  BatchSampler b(*src, 4, true, 11);
  b.set_consumed_samples(a.consumed_samples());
  for (int i = 0; i < 30; ++i) CHECK(at::equal(a.Next(4), b.Next(4)));
  CHECK_THROWS_WITH(BatchSampler(*Counting(4), 4, true, 0), Catch::Contains("4 tokens is fewer than data.seq_len + 1 = 5"));
}

TEST_CASE("a source shorter than one sample is a DataError naming the file", "[data][sampler][errors]") {
  const std::string p = TempPath("short.txt");
  std::ofstream(p, std::ios::trunc) << "abcd";
  auto src = OpenTokenSource(DataFormat::kText, p, 256, 0, 0);
  CHECK_THROWS_AS(BatchSampler(*src, 4, true, 0), DataError);
  CHECK_THROWS_WITH(BatchSampler(*src, 4, true, 0), p + ": 4 tokens is fewer than data.seq_len + 1 = 5 (one sample)");
  CHECK_NOTHROW(BatchSampler(*src, 3, true, 0));
}

}  // namespace
}  // namespace ps::data
