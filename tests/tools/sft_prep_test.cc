// ps_prep --format sft (tools/prep/: sft_example, chat_setup, sft_encoder, the .mask
// writer) against transformers: for each chat-template family fixture and input layout
// (messages, ShareGPT, alpaca, prompt/completion), the .bin ids and the .mask equal
// apply_chat_template(..., tokenize=True, return_assistant_tokens_mask=True) of
// testdata/sft/expected.json (tools/gen_sft_fixture.py): once with the folder's plain
// template (spans found by rendering) and once with the {% generation %} template.
// Then --train-on all, --max-tokens with truncate and drop.
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/catch.h"
#include "tests/temp_dir.h"
#include "tokenizer/tokenizer.h"
#include "tools/prep/chat_setup.h"
#include "tools/prep/prepare.h"

namespace ps::prep {
namespace {

using Json = nlohmann::ordered_json;
const std::string kData = "tests/tools/testdata/sft/";

struct Written {
  std::vector<std::vector<int32_t>> ids;  // per example
  std::vector<std::string> masks;         // per example, as "0110..."
  PrepReport report;
};

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Runs Prepare on one input; reads back <prefix>_train.{bin,idx,mask} (uint16 ids).
Written Run(Options opt, const std::string& family, const std::string& input) {
  opt.tokenizer_path = kData + family;
  opt.inputs = {kData + input};
  opt.output_prefix = ps::testing::TempDir() + "/sft_" + family + "_" + input;
  opt.format = OutputFormat::kSft;
  opt.valid_docs = 0;
  opt.threads = 2;
  const auto tok = tokenizer::LoadTokenizer(opt.tokenizer_path);
  const ChatSetup chat = LoadChatSetup(opt, *tok);
  Written w;
  w.report = Prepare(opt, *tok, &chat);
  const std::string bin = ReadAll(opt.output_prefix + "_train.bin");
  const std::string idx = ReadAll(opt.output_prefix + "_train.idx");
  const std::string mask = ReadAll(opt.output_prefix + "_train.mask");
  REQUIRE(mask.size() * 2 == bin.size());
  int64_t count = 0;
  std::memcpy(&count, idx.data() + 18, 8);
  size_t at = 0;
  for (int64_t s = 0; s < count; ++s) {
    int32_t length = 0;
    std::memcpy(&length, idx.data() + 34 + 4 * s, 4);
    std::vector<int32_t> ids;
    std::string m;
    for (int32_t i = 0; i < length; ++i, ++at) {
      uint16_t id = 0;
      std::memcpy(&id, bin.data() + 2 * at, 2);
      ids.push_back(id);
      REQUIRE(static_cast<uint8_t>(mask[at]) <= 1);
      m += static_cast<char>('0' + mask[at]);
    }
    w.ids.push_back(ids);
    w.masks.push_back(m);
  }
  return w;
}

Options WithVars(const Json& family) {
  Options opt;
  for (const auto& [name, value] : family["template_vars"].items()) {
    opt.sft.template_vars.emplace_back(name, value.dump());
  }
  return opt;
}

const Json& Expected() {
  static const Json expected = Json::parse(ReadAll(kData + "expected.json"));
  return expected;
}

TEST_CASE("sft ids and masks equal transformers' for every family and layout", "[prep][sft]") {
  for (const auto& [family, spec] : Expected()["families"].items()) {
    for (const bool generation_template : {false, true}) {
      Options opt = WithVars(spec);
      if (generation_template) opt.sft.chat_template_path = kData + "templates/" + family + ".jinja";
      for (const auto& [input, rows] : spec["examples"].items()) {
        INFO(family << " " << input << (generation_template ? " ({% generation %} template)" : " (plain template)"));
        const Written w = Run(opt, family, input);
        REQUIRE(w.ids.size() == rows.size());
        for (size_t i = 0; i < rows.size(); ++i) {
          INFO("example " << i + 1 << ": " << rows[i]["text"].get<std::string>());
          CHECK(w.ids[i] == rows[i]["ids"].get<std::vector<int32_t>>());
          CHECK(w.masks[i] == rows[i]["mask"].get<std::string>());
        }
        CHECK(w.report.sft.turns_without_eot == 0);
      }
    }
  }
}

TEST_CASE("sft --train-on all masks every token", "[prep][sft]") {
  Options opt;
  opt.sft.train_on = TrainOn::kAll;
  const Written w = Run(opt, "qwen25", "messages.jsonl");
  const Json& rows = Expected()["families"]["qwen25"]["examples"]["messages.jsonl"];
  for (size_t i = 0; i < rows.size(); ++i) {
    CHECK(w.ids[i] == rows[i]["ids"].get<std::vector<int32_t>>());
    CHECK(w.masks[i] == std::string(w.ids[i].size(), '1'));
  }
  CHECK(w.report.sft.trained_tokens == w.report.tokens);
}

TEST_CASE("sft --max-tokens truncates or drops, and the summary counts both", "[prep][sft]") {
  const Json& rows = Expected()["families"]["llama3"]["examples"]["messages.jsonl"];
  const Json& spec = Expected()["families"]["llama3"];
  Options opt = WithVars(spec);
  opt.sft.max_tokens = 95;
  size_t over = 0, untrained_after_cut = 0;
  for (const auto& r : rows) {
    if (r["ids"].size() <= 95) continue;
    ++over;
    untrained_after_cut += r["mask"].get<std::string>().substr(0, 95).find('1') == std::string::npos;
  }
  REQUIRE((over > 0 && untrained_after_cut > 0));
  const Written cut = Run(opt, "llama3", "messages.jsonl");
  CHECK(cut.report.sft.truncated == static_cast<int64_t>(over - untrained_after_cut));
  CHECK(cut.report.sft.dropped_untrained == static_cast<int64_t>(untrained_after_cut));
  size_t k = 0;
  for (const auto& r : rows) {
    std::vector<int32_t> ids = r["ids"].get<std::vector<int32_t>>();
    const std::string mask = r["mask"].get<std::string>().substr(0, 95);
    if (mask.find('1') == std::string::npos) continue;  // dropped: nothing left to train on
    ids.resize(std::min<size_t>(ids.size(), 95));
    CHECK(cut.ids[k] == ids);
    CHECK(cut.masks[k] == mask);
    ++k;
  }
  CHECK(k == cut.ids.size());
  opt.sft.overlong = Overlong::kDrop;
  opt.sft.max_tokens = 120;
  size_t over_120 = 0;
  for (const auto& r : rows) over_120 += r["ids"].size() > 120;
  REQUIRE((over_120 > 0 && over_120 < rows.size()));
  const Written dropped = Run(opt, "llama3", "messages.jsonl");
  CHECK(dropped.report.sft.dropped_overlong == static_cast<int64_t>(over_120));
  CHECK(dropped.report.sft.truncated == 0);
  CHECK(dropped.ids.size() == rows.size() - over_120);
}

}  // namespace
}  // namespace ps::prep
