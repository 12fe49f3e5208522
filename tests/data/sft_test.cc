// Chat data (data.format sft): SftExamples reads <prefix>.bin/.idx/.mask, each document
// one example; SftBatcher's padded rows and packed rows hold the expected inputs, labels
// (-100 where the target is masked out and on padding), attention masks, positions and
// segments; shuffled draws resume exactly from consumed_samples and shard by rank; the
// slot counts give the packing efficiency; a missing, mis-sized or non-0/1 .mask is a
// DataError naming it, and megatron data with a .mask beside points at data.format: sft.
#include <ATen/ATen.h>

#include <filesystem>
#include <fstream>
#include <vector>

#include "data/data_error.h"
#include "data/format_inference.h"
#include "data/megatron_format.h"
#include "data/sft_batcher.h"
#include "data/sft_examples.h"
#include "data/token_source.h"
#include "tests/catch.h"
#include "tests/temp_dir.h"

namespace ps::data {
namespace {

struct Example {
  std::vector<int32_t> ids;
  std::vector<uint8_t> mask;
};

// Four examples (vocab 20): with seq_len 6 they take 4, 2, 6 (truncated from 7) and 1
// input slots.
const std::vector<Example> kExamples = {
    {{1, 2, 3, 4, 5}, {0, 0, 1, 1, 1}},
    {{6, 7, 8}, {0, 1, 1}},
    {{9, 10, 11, 12, 13, 14, 15, 16}, {0, 0, 0, 1, 1, 1, 1, 1}},
    {{17, 18}, {0, 1}},
};
constexpr int64_t kSeqLen = 6;

void WriteMask(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

// Writes <prefix>.bin/.idx and (when `with_mask`) <prefix>.mask; returns the prefix.
std::string WriteSft(const std::string& name, const std::vector<Example>& examples = kExamples,
                     bool with_mask = true) {
  const std::string prefix = ps::testing::TempDir() + "/" + name;
  MegatronWriter w(prefix, MegatronDtype::kUint16);
  std::vector<uint8_t> mask;
  for (const Example& e : examples) {
    w.AddDocument(e.ids.data(), static_cast<int64_t>(e.ids.size()));
    mask.insert(mask.end(), e.mask.begin(), e.mask.end());
  }
  w.Finish();
  if (with_mask) WriteMask(prefix + ".mask", mask);
  return prefix;
}

std::vector<int64_t> Row(const at::Tensor& t, int64_t row) {
  const at::Tensor r = t[row].contiguous();
  return std::vector<int64_t>(r.data_ptr<int64_t>(), r.data_ptr<int64_t>() + r.numel());
}

using V = std::vector<int64_t>;

TEST_CASE("sft: each document is one example, with its mask", "[data][sft]") {
  const auto ex = OpenSftExamples(WriteSft("read"), 20, "data.train_path");
  REQUIRE(ex->num_examples() == 4);
  CHECK(ex->num_tokens() == 18);
  CHECK(ex->length(2) == 8);
  std::vector<int64_t> ids(3);
  std::vector<uint8_t> mask(3);
  ex->Read(2, 3, ids.data(), mask.data());
  CHECK(ids == V{9, 10, 11});
  CHECK(mask == std::vector<uint8_t>{0, 0, 0});
  CHECK(InferDataFormat(ex->description(), "data.train_path") == DataFormat::kSft);
}

TEST_CASE("sft: one example per row from its start, truncated, padded; labels only where masked in",
          "[data][sft]") {
  const auto ex = OpenSftExamples(WriteSft("rows"), 20);
  SftBatcher batcher(*ex, kSeqLen, /*packing=*/false, /*shuffle=*/false, 0);
  CHECK(batcher.samples_per_epoch() == 4);
  const SftBatch b = batcher.Next(4);
  CHECK(b.input_ids.sizes() == at::IntArrayRef{4, kSeqLen});
  CHECK_FALSE(b.position_ids.defined());
  CHECK_FALSE(b.segment_ids.defined());
  CHECK(Row(b.input_ids, 0) == V{1, 2, 3, 4, 0, 0});
  CHECK(Row(b.labels, 0) == V{-100, 3, 4, 5, -100, -100});
  CHECK(Row(b.attention_mask, 0) == V{1, 1, 1, 1, 0, 0});
  CHECK(Row(b.input_ids, 1) == V{6, 7, 0, 0, 0, 0});
  CHECK(Row(b.labels, 1) == V{7, 8, -100, -100, -100, -100});
  CHECK(Row(b.input_ids, 2) == V{9, 10, 11, 12, 13, 14});  // 8 tokens cut to seq_len + 1
  CHECK(Row(b.labels, 2) == V{-100, -100, 12, 13, 14, 15});
  CHECK(Row(b.attention_mask, 2) == V{1, 1, 1, 1, 1, 1});
  CHECK(Row(b.input_ids, 3) == V{17, 0, 0, 0, 0, 0});
  CHECK(Row(b.labels, 3) == V{18, -100, -100, -100, -100, -100});
  CHECK(batcher.handed_out().token_slots == 13);
  CHECK(batcher.handed_out().total_slots == 24);
  CHECK(batcher.handed_out().target_tokens == 10);
  CHECK(batcher.epoch().packing_efficiency() == Approx(13.0 / 24.0));
}

TEST_CASE("sft packing: whole examples greedily per row, positions and segments restart", "[data][sft][packing]") {
  const auto ex = OpenSftExamples(WriteSft("packed"), 20);
  SftBatcher batcher(*ex, kSeqLen, /*packing=*/true, /*shuffle=*/false, 0);
  CHECK(batcher.samples_per_epoch() == 3);  // {0, 1}, {2}, {3}
  CHECK(batcher.epoch().packing_efficiency() == Approx(13.0 / 18.0));
  CHECK(std::isnan(batcher.handed_out().packing_efficiency()));
  const SftBatch b = batcher.Next(3);
  CHECK(Row(b.input_ids, 0) == V{1, 2, 3, 4, 6, 7});
  CHECK(Row(b.labels, 0) == V{-100, 3, 4, 5, 7, 8});  // no target crosses into the next example
  CHECK(Row(b.position_ids, 0) == V{0, 1, 2, 3, 0, 1});
  CHECK(Row(b.segment_ids, 0) == V{0, 0, 0, 0, 1, 1});
  CHECK(Row(b.attention_mask, 0) == V{1, 1, 1, 1, 1, 1});
  CHECK(Row(b.input_ids, 1) == V{9, 10, 11, 12, 13, 14});
  CHECK(Row(b.position_ids, 1) == V{0, 1, 2, 3, 4, 5});
  CHECK(Row(b.segment_ids, 1) == V{0, 0, 0, 0, 0, 0});
  CHECK(Row(b.input_ids, 2) == V{17, 0, 0, 0, 0, 0});
  CHECK(Row(b.labels, 2) == V{18, -100, -100, -100, -100, -100});
  CHECK(Row(b.position_ids, 2) == V{0, 0, 1, 2, 3, 4});  // the padding: a segment of its own
  CHECK(Row(b.segment_ids, 2) == V{0, 1, 1, 1, 1, 1});
  CHECK(Row(b.attention_mask, 2) == V{1, 0, 0, 0, 0, 0});
  CHECK(batcher.handed_out().packing_efficiency() == Approx(13.0 / 18.0));
  CHECK(batcher.handed_out().target_tokens == 10);
}

// Many examples of varied lengths, for the shuffled and sharded draws.
std::vector<Example> ManyExamples() {
  std::vector<Example> out;
  for (int i = 0; i < 23; ++i) {
    Example e;
    for (int k = 0; k < 2 + (i * 5) % 9; ++k) {
      e.ids.push_back(1 + (i * 7 + k) % 19);
      e.mask.push_back(k % 3 != 0);
    }
    out.push_back(e);
  }
  return out;
}

void CheckSame(const SftBatch& a, const SftBatch& b) {
  CHECK(a.input_ids.equal(b.input_ids));
  CHECK(a.labels.equal(b.labels));
  CHECK(a.attention_mask.equal(b.attention_mask));
  CHECK(a.position_ids.defined() == b.position_ids.defined());
  if (a.position_ids.defined()) {
    CHECK(a.position_ids.equal(b.position_ids));
    CHECK(a.segment_ids.equal(b.segment_ids));
  }
}

TEST_CASE("sft: resuming from consumed_samples gives the same batches, padded or packed", "[data][sft][resume]") {
  const auto ex = OpenSftExamples(WriteSft("resume", ManyExamples()), 20);
  for (const bool packing : {false, true}) {
    SftBatcher first(*ex, kSeqLen, packing, /*shuffle=*/true, 7);
    std::vector<SftBatch> batches;
    for (int i = 0; i < 12; ++i) batches.push_back(first.Next(3));  // crosses epochs either way
    SftBatcher resumed(*ex, kSeqLen, packing, /*shuffle=*/true, 7);
    resumed.set_consumed_samples(5 * 3);
    for (int i = 5; i < 12; ++i) CheckSame(resumed.Next(3), batches[i]);
    CHECK(resumed.consumed_samples() == first.consumed_samples());
    SftBatcher other_seed(*ex, kSeqLen, packing, /*shuffle=*/true, 8);
    CHECK_FALSE(other_seed.Next(3).input_ids.equal(batches[0].input_ids));
  }
}

TEST_CASE("sft: two ranks take disjoint halves of one draw", "[data][sft][ranks]") {
  const auto ex = OpenSftExamples(WriteSft("ranks", ManyExamples()), 20);
  SftBatcher one(*ex, kSeqLen, /*packing=*/true, /*shuffle=*/true, 3);
  SftBatcher r0(*ex, kSeqLen, true, true, 3, 0, 2), r1(*ex, kSeqLen, true, true, 3, 1, 2);
  const SftBatch all = one.Next(4);
  const SftBatch a = r0.Next(2), b = r1.Next(2);
  CHECK(at::cat({a.input_ids, b.input_ids}).equal(all.input_ids));
  CHECK(at::cat({a.segment_ids, b.segment_ids}).equal(all.segment_ids));
  CHECK(r0.consumed_samples() == 4);
}

TEST_CASE("sft: a missing, mis-sized or non-0/1 .mask is a DataError naming it", "[data][sft][errors]") {
  const std::string p = WriteSft("no_mask", kExamples, /*with_mask=*/false);
  CHECK_THROWS_AS(OpenSftExamples(p, 20, "data.train_path"), DataError);
  CHECK_THROWS_WITH(OpenSftExamples(p + ".bin", 20, "data.train_path"),
                    Catch::Contains(p + ".mask: cannot open") && Catch::Contains("ps_prep --format sft") &&
                        Catch::Contains("(data.train_path)"));
  WriteMask(p + ".mask", std::vector<uint8_t>(17, 1));
  CHECK_THROWS_WITH(OpenSftExamples(p, 20, "data.valid_path"),
                    Catch::Contains(p + ".mask: 17 bytes, but " + p + ".bin holds 18 tokens") &&
                        Catch::Contains("(data.valid_path)"));
  std::vector<uint8_t> bad(18, 1);
  bad[5] = 2;
  WriteMask(p + ".mask", bad);
  CHECK_THROWS_WITH(OpenSftExamples(p, 20), Catch::Contains(p + ".mask: byte 5 is 2"));
  WriteMask(p + ".mask", std::vector<uint8_t>(18, 1));
  CHECK_THROWS_WITH(OpenSftExamples(p, 10), Catch::Contains(p + ".bin: token 10 at position 9"));
  CHECK(OpenSftExamples(p, 20)->num_examples() == 4);
}

TEST_CASE("sft: megatron data with a .mask beside points at data.format: sft; sft is no token stream",
          "[data][sft][errors]") {
  const std::string p = WriteSft("as_megatron");
  CHECK_THROWS_AS(OpenTokenSource(DataFormat::kMegatron, p, 20, 0, 0), DataError);
  CHECK_THROWS_WITH(OpenTokenSource(DataFormat::kMegatron, p, 20, 0, 0, "data.train_path"),
                    Catch::Contains(p + ".mask: this is chat data") && Catch::Contains("set data.format: sft") &&
                        Catch::Contains("(data.train_path)"));
  CHECK_THROWS_WITH(OpenTokenSource(DataFormat::kSft, p, 20, 0, 0), Catch::Contains("not a token stream"));
}

TEST_CASE("sft: data with no example of two tokens is a DataError naming it", "[data][sft][errors]") {
  const std::string p = WriteSft("too_short", {{{1}, {1}}, {{2}, {1}}});
  const auto ex = OpenSftExamples(p, 20);
  CHECK_THROWS_WITH(SftBatcher(*ex, kSeqLen, false, false, 0), Catch::Contains(p + ": none of its 2 examples"));
}

TEST_CASE("sft: data with no trained token within data.seq_len is a DataError naming it (it would train on nothing)",
          "[data][sft][errors]") {
  // Targets only past the first 3 positions: seq_len 3 sees none, 4 sees one.
  const std::string p = WriteSft("late_targets", {{{1, 2, 3, 4, 5}, {0, 0, 0, 0, 1}}, {{6, 7, 8}, {0, 0, 0}}});
  const auto ex = OpenSftExamples(p, 20);
  for (bool packing : {false, true}) {
    CHECK_THROWS_WITH(SftBatcher(*ex, 3, packing, false, 0),
                      Catch::Contains(p + ": none of its 2 examples has a trained token within their first 3"));
  }
  CHECK_NOTHROW(SftBatcher(*ex, 4, false, false, 0));
  const std::string none = WriteSft("all_zero_mask", {{{1, 2, 3}, {0, 0, 0}}});
  CHECK_THROWS_WITH(SftBatcher(*OpenSftExamples(none, 20), kSeqLen, false, false, 0),
                    Catch::Contains("has a trained token"));
}

}  // namespace
}  // namespace ps::data
