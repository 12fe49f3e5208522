// ps_sample --chat's conversation (tools/chat_session.h) against transformers: the ids of
// each turn's prompt equal apply_chat_template(messages, add_generation_prompt=True,
// tokenize=True) of the Llama 3 template fixture (literals below, computed with
// transformers 5 on tests/tools/testdata/llama_path/llama_chat), a reply joins the
// conversation without its end-of-turn id, and a turn the template refuses (or a line
// that is not UTF-8) is left out.
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/catch.h"
#include "tests/temp_dir.h"
#include "tokenizer/tokenizer.h"
#include "tools/chat_session.h"
#include "tools/prep/chat_setup.h"
#include "tools/prep/options.h"

namespace ps::tools {
namespace {

const std::string kModel = "tests/tools/testdata/llama_path/llama_chat";

// [system "You add numbers.", user "What is 3 plus 4?"] with the generation prompt.
const std::vector<int32_t> kFirst = {
    0,   704, 540, 670, 71,  79,  705, 201, 201, 37,  87,  86,  86,  571, 223, 45,  80,  299, 78,  288, 314,
    223, 38,  309, 71,  28,  223, 38,  71,  596, 359, 261, 223, 694, 20,  21,  201, 54,  81,  70,  67,  91,
    223, 38,  309, 71,  28,  223, 20,  24,  223, 44,  87,  78,  223, 694, 20,  22,  201, 201, 59,  287, 274,
    70,  70,  326, 87,  359, 346, 16,  2,   704, 87,  85,  261, 705, 201, 201, 57,  74,  309, 331, 223, 21,
    286, 78,  87,  85,  223, 22,  33,  2,   704, 67,  417, 513, 86,  705, 201, 201};
// ... then assistant "7.", user "And 5 plus 6?".
const std::vector<int32_t> kSecondTail = {25, 16, 2, 704, 87, 85, 261, 705, 201, 201, 35, 411, 223, 23, 286,
                                          78, 87, 85, 223, 24, 33, 2,   704, 67,  417, 513, 86, 705, 201, 201};

TEST_CASE("ChatSession: each turn's prompt is apply_chat_template's, replies join without their end of turn") {
  const auto tok = tokenizer::LoadTokenizer(kModel);
  prep::Options opt;
  opt.tokenizer_path = kModel;
  const prep::ChatSetup setup = prep::LoadChatSetup(opt, *tok);
  CHECK(setup.end_of_turn_ids.count(2) == 1);  // <|eot_id|>, from generation_config.json

  ChatSession session(setup, *tok, "You add numbers.");
  CHECK(session.PromptAfterUserTurn("What is 3 plus 4?") == kFirst);
  std::vector<int32_t> reply = tok->Encode("7.");
  reply.push_back(2);
  CHECK(session.AddReply(reply) == "7.");
  std::vector<int32_t> second = kFirst;
  second.insert(second.end(), kSecondTail.begin(), kSecondTail.end());
  CHECK(session.PromptAfterUserTurn("And 5 plus 6?") == second);
  CHECK(session.turns() == 4);
}

TEST_CASE("ChatSession: a turn the template refuses is reported with the template's message and left out") {
  const auto tok = tokenizer::LoadTokenizer(kModel);
  const std::string path = ps::testing::TempDir() + "/refusing.jinja";
  std::ofstream(path) << "{% for m in messages %}{% if m.content == 'bad' %}{{ raise_exception('no bad turns') }}"
                         "{% endif %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
                         "{% if add_generation_prompt %}assistant:{% endif %}";
  prep::Options opt;
  opt.tokenizer_path = kModel;
  opt.sft.chat_template_path = path;
  const prep::ChatSetup setup = prep::LoadChatSetup(opt, *tok);
  ChatSession session(setup, *tok, "");
  CHECK(tok->Decode(session.PromptAfterUserTurn("hi")) == "user: hi\nassistant:");
  session.AddReply(tok->Encode("hello"));
  CHECK_THROWS_WITH(session.PromptAfterUserTurn("bad"), Catch::Contains("refusing.jinja (--chat-template)") &&
                                                            Catch::Contains("no bad turns"));
  CHECK(session.turns() == 2);
  // A line that is not UTF-8 is left out too (it ended the session), and joins no history.
  CHECK_THROWS_WITH(session.PromptAfterUserTurn("hi\xff"), Catch::Contains("the line is not valid UTF-8 (byte 3)"));
  CHECK(session.turns() == 2);
  CHECK(tok->Decode(session.PromptAfterUserTurn("again")) == "user: hi\nassistant: hello\nuser: again\nassistant:");
}

}  // namespace
}  // namespace ps::tools
