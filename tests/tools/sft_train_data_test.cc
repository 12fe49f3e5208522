// ps_prep --format sft's output read back as ps_train reads it (data.format sft): for
// chat-template family fixtures, each example's inputs are its tokens and its labels the
// next token exactly where transformers' assistant mask (testdata/sft/expected.json,
// tools/gen_sft_fixture.py) marks that token, -100 elsewhere; packing keeps every one of
// those targets. The two halves of the mask convention (docs/data.md, "The mask file" and
// "Training on chat data") meet here.
#include <ATen/ATen.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/sft_batcher.h"
#include "data/sft_examples.h"
#include "tests/catch.h"
#include "tests/temp_dir.h"
#include "tokenizer/tokenizer.h"
#include "tools/prep/chat_setup.h"
#include "tools/prep/prepare.h"

namespace ps::prep {
namespace {

using Json = nlohmann::ordered_json;
const std::string kData = "tests/tools/testdata/sft/";

Json Expected() {
  std::ifstream in(kData + "expected.json");
  REQUIRE(in.good());
  return Json::parse(std::string(std::istreambuf_iterator<char>(in), {}));
}

// Runs ps_prep's Prepare on `input` with `family`'s folder; returns the training prefix.
std::string Prep(const std::string& family, const Json& spec, const std::string& input) {
  Options opt;
  for (const auto& [name, value] : spec["template_vars"].items()) opt.sft.template_vars.emplace_back(name, value.dump());
  opt.tokenizer_path = kData + family;
  opt.inputs = {kData + input};
  opt.output_prefix = ps::testing::TempDir() + "/train_data_" + family;
  opt.format = OutputFormat::kSft;
  opt.valid_docs = 0;
  opt.threads = 1;
  const auto tok = tokenizer::LoadTokenizer(opt.tokenizer_path);
  const ChatSetup chat = LoadChatSetup(opt, *tok);
  Prepare(opt, *tok, &chat);
  return opt.output_prefix + "_train";
}

TEST_CASE("ps_prep's sft output trains on transformers' assistant tokens, padded or packed", "[prep][sft][data]") {
  const Json expected = Expected();
  for (const std::string family : {"llama3", "qwen25", "mistral"}) {
    INFO(family);
    const Json& spec = expected["families"][family];
    const Json& rows = spec["examples"]["messages.jsonl"];
    const auto examples = data::OpenSftExamples(Prep(family, spec, "messages.jsonl"), 1 << 20, "data.train_path");
    REQUIRE(examples->num_examples() == static_cast<int64_t>(rows.size()));
    int64_t longest = 0, targets = 0;
    for (const auto& r : rows) longest = std::max<int64_t>(longest, r["ids"].size());
    data::SftBatcher padded(*examples, longest - 1, /*packing=*/false, /*shuffle=*/false, 0);
    const data::SftBatch b = padded.Next(examples->num_examples());
    for (size_t i = 0; i < rows.size(); ++i) {
      INFO("example " << i + 1);
      const auto ids = rows[i]["ids"].get<std::vector<int64_t>>();
      const std::string mask = rows[i]["mask"].get<std::string>();
      std::vector<int64_t> want_inputs(longest - 1, 0), want_labels(longest - 1, -100);
      for (size_t t = 0; t + 1 < ids.size(); ++t) {
        want_inputs[t] = ids[t];
        if (mask[t + 1] == '1') want_labels[t] = ids[t + 1];
      }
      targets += std::count(mask.begin() + 1, mask.end(), '1');
      const at::Tensor in = b.input_ids[i].contiguous(), lab = b.labels[i].contiguous();
      CHECK(std::vector<int64_t>(in.data_ptr<int64_t>(), in.data_ptr<int64_t>() + in.numel()) == want_inputs);
      CHECK(std::vector<int64_t>(lab.data_ptr<int64_t>(), lab.data_ptr<int64_t>() + lab.numel()) == want_labels);
    }
    CHECK(padded.handed_out().target_tokens == targets);
    // Rows of twice the longest example: at least two examples share each packed row.
    data::SftBatcher packed(*examples, 2 * longest, /*packing=*/true, /*shuffle=*/false, 0);
    data::SftBatcher wide(*examples, 2 * longest, /*packing=*/false, /*shuffle=*/false, 0);
    CHECK(packed.epoch().target_tokens == targets);
    CHECK(packed.samples_per_epoch() <= (examples->num_examples() + 1) / 2);
    CHECK(packed.epoch().packing_efficiency() > wide.epoch().packing_efficiency());
  }
}

}  // namespace
}  // namespace ps::prep
