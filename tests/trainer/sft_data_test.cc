// data.format sft through ps_train's config and RunData: data.packing without sft and
// sft with BERT are ConfigErrors naming the key and line; a Megatron prefix with a .mask
// beside is inferred as sft; RunData hands out padded or packed batches (position_ids and
// segment_ids only when packed), the validation file of the same format, and the slot
// counts behind the packing efficiency; a missing .mask is a DataError naming it. And a
// whole run on chat data through Train(): packed, accumulated, evaluated over targets.
// A checkpoint resumes only under its sample layout (format sft and packing fingerprinted).
#include <ATen/ATen.h>

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "data/data_error.h"
#include "data/megatron_format.h"
#include "tests/catch.h"
#include "tests/temp_dir.h"
#include "trainer/config/config_loader.h"
#include "trainer/io/run_folder.h"
#include "trainer/run_data.h"
#include "trainer/train_loop.h"

namespace ps::trainer {
namespace {

std::optional<std::string> NoEnv(const std::string&) { return std::nullopt; }

// Chat data of `n` examples (3 to 7 tokens, vocab 20) at TempDir()/name; returns the prefix.
std::string WriteChats(const std::string& name, int n, bool with_mask = true) {
  const std::string prefix = ps::testing::TempDir() + "/" + name;
  data::MegatronWriter w(prefix, data::MegatronDtype::kUint16);
  std::vector<char> mask;
  for (int e = 0; e < n; ++e) {
    std::vector<int32_t> ids;
    for (int k = 0; k < 3 + e % 5; ++k) {
      ids.push_back(1 + (e + k) % 19);
      mask.push_back(k >= 2 ? 1 : 0);  // a two-token prompt, then the answer
    }
    w.AddDocument(ids.data(), static_cast<int64_t>(ids.size()));
  }
  w.Finish();
  if (with_mask) std::ofstream(prefix + ".mask", std::ios::binary).write(mask.data(), mask.size());
  return prefix;
}

const std::string kModel = "model: {n_layer: 1, n_head: 2, n_embd: 16, n_positions: 256, vocab_size: 20}\n";

Config Load(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  return LoadConfigText(kModel + yaml, "test.yaml", overrides, NoEnv);
}

std::string ErrorOf(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  try {
    Load(yaml, overrides);
  } catch (const ConfigError& e) {
    return e.what();
  }
  FAIL("config loaded but an error was expected:\n" << yaml);
  return "";
}

TEST_CASE("sft config: packing needs sft; sft needs a next-token model; a .mask beside means sft", "[sft][config]") {
  CHECK(ErrorOf("data:\n  format: synthetic\n  packing: true\n") ==
        "test.yaml:4:12: data.packing: true packs chat examples several to a row and needs data.format: sft "
        "(data.format is synthetic)");
  const std::string p = WriteChats("config_chats", 6);
  CHECK(ErrorOf("data: {train_path: " + p + "}\n", {"data.format=megatron", "data.packing=true"})
            .find("--set data.packing=true: data.packing: true packs chat examples") == 0);
  CHECK(ErrorOf("data: {format: sft, train_path: " + p + "}\n", {"model.type=bert", "model.vocab_size=300"})
            .find("data.format sft trains next-token prediction on chat examples: it needs model.type gpt or llama") !=
        std::string::npos);
  const Config c = Load("data: {train_path: " + p + ", packing: true}\n");
  CHECK(c.data.format == data::DataFormat::kSft);
  CHECK(c.data.packing);
  CHECK(ConfigToYaml(c).find("  packing: true\n") != std::string::npos);
}

TEST_CASE("sft RunData: padded or packed batches, validation, packing efficiency", "[sft][run_data]") {
  const std::string train = WriteChats("train_chats", 20), valid = WriteChats("valid_chats", 5);
  const std::string yaml = "data: {format: sft, seq_len: 8, train_path: " + train + ", valid_path: " + valid + "}\n";
  for (const bool packing : {false, true}) {
    const Config c = Load(yaml, {packing ? "data.packing=true" : "data.packing=false"});
    RunData data(c, 0, 1);
    CHECK(data.description().find(train + " (sft: 20 examples in ") == 0);
    CHECK(data.num_tokens() == 20 * 5);  // lengths 3..7, four times
    CHECK(data.train().samples_per_epoch() == (packing ? 13 : 20));
    CHECK(std::isnan(data.train().handed_out().packing_efficiency()));
    const models::Batch b = data.train().Next(4);
    CHECK(b.input_ids.sizes() == at::IntArrayRef{4, 8});
    CHECK(b.position_ids.defined() == packing);
    CHECK(b.segment_ids.defined() == packing);
    CHECK(b.attention_mask.defined());
    const data::SlotCounts& counts = data.train().handed_out();
    CHECK(counts.total_slots == 32);
    CHECK(counts.token_slots == b.attention_mask.sum().item<int64_t>());
    CHECK(counts.target_tokens == models::CountedTargets(b));
    CHECK(counts.packing_efficiency() == Approx(counts.token_slots / 32.0));
    REQUIRE(data.has_valid());
    const auto v = data.Valid();
    CHECK(v->samples_per_epoch() == (packing ? 4 : 5));
    CHECK(v->Next(2).labels.ne(-100).sum().item<int64_t>() > 0);
  }
}

TEST_CASE("sft RunData: a missing .mask and megatron data with a .mask are DataErrors naming the .mask",
          "[sft][run_data][errors]") {
  const std::string bare = WriteChats("bare_chats", 4, /*with_mask=*/false);
  const Config c = Load("data: {format: sft, seq_len: 8, train_path: " + bare + "}\n");
  CHECK_THROWS_AS(RunData(c, 0, 1), data::DataError);
  CHECK_THROWS_WITH(RunData(c, 0, 1), Catch::Contains(bare + ".mask: cannot open") &&
                                          Catch::Contains("(data.train_path)"));
  const std::string p = WriteChats("megatron_chats", 4);
  const Config m = Load("data: {format: megatron, seq_len: 8, train_path: " + p + "}\n");
  CHECK_THROWS_WITH(RunData(m, 0, 1), Catch::Contains(p + ".mask: this is chat data") &&
                                          Catch::Contains("set data.format: sft"));
}

TEST_CASE("chat data trains through Train(): packed rows, accumulation, evaluation over targets", "[sft][train]") {
  const std::string train = WriteChats("sft_run_train", 40), valid = WriteChats("sft_run_valid", 8);
  const std::string out = ps::testing::TempDir() + "/sft_run";
  const Config c = Load("data: {format: sft, packing: true, seq_len: 16, train_path: " + train + ", valid_path: " +
                        valid + "}\n"
                        "train: {micro_batch_size: 2, global_batch_size: 4, max_steps: 3, eval_steps: 2}\n"
                        "checkpoint: {at_end: false}\n",
                        {"run.output_dir=" + out, "run.device=cpu", "run.threads=1", "run.overwrite=true"});
  const TrainResult r = Train(c);
  REQUIRE(r.losses.size() == 3);
  for (const double loss : r.losses) CHECK(std::isfinite(loss));
  CHECK(std::isfinite(r.final_eval_loss));
  CHECK(r.packing_efficiency > 0.5);  // examples of 3 to 7 tokens packed into rows of 16
  CHECK(r.packing_efficiency <= 1.0);
  std::ifstream metrics(out + "/metrics.jsonl");
  std::string line, summary;
  while (std::getline(metrics, line)) {
    if (line.find("\"summary\"") != std::string::npos) summary = line;
  }
  CHECK(summary.find("\"packing_efficiency\": ") != std::string::npos);
}

TEST_CASE("a checkpoint resumes only under the same sample layout: sft and packing are in the fingerprint",
          "[sft][resume]") {
  const std::string p = WriteChats("sft_fingerprint", 6);
  const nlohmann::json packed = RunFingerprint(Load("data: {format: sft, packing: true, train_path: " + p + "}\n"));
  const nlohmann::json padded = RunFingerprint(Load("data: {format: sft, train_path: " + p + "}\n"));
  const nlohmann::json stream = RunFingerprint(Load("data: {format: synthetic}\n"));
  CHECK_NOTHROW(CheckFingerprint(packed, packed, "ck"));
  // data.consumed_samples counts packed rows in one and examples in the other.
  CHECK_THROWS_WITH(CheckFingerprint(packed, padded, "ck"), Catch::Contains("data.packing: checkpoint true, this config false"));
  CHECK_THROWS_WITH(CheckFingerprint(padded, stream, "ck"), Catch::Contains("data.format: checkpoint \"sft\", this config (absent)"));
  CHECK_THROWS_WITH(CheckFingerprint(stream, padded, "ck"), Catch::Contains("data.format: checkpoint (absent), this config \"sft\""));
  // Token-stream runs fingerprint as before, so their older checkpoints still resume.
  CHECK_FALSE(stream.contains("data.format"));
  CHECK_FALSE(stream.contains("data.packing"));
}

}  // namespace
}  // namespace ps::trainer
