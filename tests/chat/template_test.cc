// The chat-template engine (chat/template.h): every case of testdata/template_cases.json
// (template, context, and the text transformers renders) renders the same; generation
// spans and replacement; errors name the construct and the template line.
#include "chat/template.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/catch.h"

namespace ps::chat {
namespace {

const char kCases[] = "tests/chat/testdata/template_cases.json";

std::string Render(const std::string& source,
                   const nlohmann::ordered_json& context = nlohmann::ordered_json::object()) {
  return ChatTemplate(source).Render(Value::FromJson(context)).text;
}

// The message of the TemplateError that rendering `source` throws ("" if none).
std::string ErrorOf(const std::string& source,
                    const nlohmann::ordered_json& context = nlohmann::ordered_json::object()) {
  try {
    Render(source, context);
  } catch (const TemplateError& e) {
    return e.what();
  }
  return "";
}

// Also the sft fixtures' family templates with tools, tool calls and a generation prompt.
TEST_CASE("every construct renders as transformers renders it", "[chat]") {
  std::ifstream in(kCases);
  REQUIRE(in.good());
  const nlohmann::ordered_json cases = nlohmann::ordered_json::parse(in);
  REQUIRE(cases.size() >= 40);
  for (const auto& c : cases) {
    INFO("case " << c["name"].get<std::string>() << ": " << c["template"].get<std::string>());
    if (c.contains("error")) {  // raise_exception: the same message
      CHECK_THROWS_WITH(Render(c["template"].get<std::string>(), c["context"]),
                        Catch::Contains("raise_exception: " + c["error"].get<std::string>()));
      continue;
    }
    CHECK(Render(c["template"].get<std::string>(), c["context"]) == c["expected"].get<std::string>());
  }
}

TEST_CASE("generation blocks: byte spans, and one block replaced", "[chat]") {
  const ChatTemplate t(
      "{% for m in messages %}<{{ m.role }}>{% if m.role == 'assistant' %}{% generation %}{{ m.content }}!{% "
      "endgeneration %}{% else %}{{ m.content }}{% endif %}{% endfor %}");
  CHECK(t.has_generation_blocks());
  const auto ctx = Value::FromJson(nlohmann::ordered_json::parse(
      R"({"messages": [{"role": "user", "content": "é"}, {"role": "assistant", "content": "ab"},
                       {"role": "assistant", "content": "c"}]})"));
  const RenderResult r = t.Render(ctx);
  CHECK(r.text == "<user>é<assistant>ab!<assistant>c!");
  REQUIRE(r.generation_spans_bytes.size() == 2);
  CHECK(r.generation_spans_bytes[0] == std::make_pair<int64_t, int64_t>(19, 22));
  CHECK(r.generation_spans_bytes[1] == std::make_pair<int64_t, int64_t>(33, 35));
  RenderOptions replace;
  replace.replace_generation_block = 1;
  replace.replacement = "#";
  CHECK(t.Render(ctx, replace).text == "<user>é<assistant>ab!<assistant>#");
  CHECK_FALSE(ChatTemplate("{{ x }}").has_generation_blocks());
}

TEST_CASE("raise_exception stops the render with the template's message and line", "[chat]") {
  const std::string source =
      "a\n{% if messages[0].role != 'user' %}\n{{ raise_exception('Roles must alternate') }}\n{% endif %}";
  try {
    Render(source, {{"messages", {{{"role", "bot"}, {"content", "x"}}}}});
    FAIL("no exception");
  } catch (const TemplateRaised& e) {
    CHECK(std::string(e.what()) == "chat template line 3: raise_exception: Roles must alternate");
  }
}

TEST_CASE("strftime_now formats the local time", "[chat]") {
  const std::string year = Render("{{ strftime_now('%Y') }}");
  REQUIRE(year.size() == 4);
  CHECK(year >= "2024");
}

TEST_CASE("JSON nested beyond the bound is an error, not a stack overflow", "[chat]") {
  const auto nested = [](int depth) {
    nlohmann::ordered_json j = 1;
    for (int i = 0; i < depth; ++i) j = nlohmann::ordered_json::array({j});
    return j;
  };
  CHECK_NOTHROW(Value::FromJson(nested(Value::kMaxJsonDepth)));
  CHECK_THROWS_WITH(Value::FromJson(nested(Value::kMaxJsonDepth + 1)), Catch::Contains("nested deeper than 256"));
  CHECK_THROWS_WITH(Value::FromJson(nested(20000)), Catch::Contains("nested deeper than"));
}

TEST_CASE("unsupported constructs are errors naming them and their line", "[chat]") {
  CHECK(ErrorOf("x\n{% macro f() %}{% endmacro %}") == "chat template line 2: unsupported statement '{% macro %}'");
  CHECK(ErrorOf("{% include 'x' %}") == "chat template line 1: unsupported statement '{% include %}'");
  CHECK(ErrorOf("\n\n{{ x | wordwrap }}") == "chat template line 3: unsupported filter 'wordwrap'");
  CHECK(ErrorOf("{{ x is escaped }}") == "chat template line 1: unsupported test 'is escaped'");
  CHECK(ErrorOf("{{ 'a'.zfill(3) }}") == "chat template line 1: unsupported method 'zfill' of a str");
  CHECK(ErrorOf("{{ foo(1) }}") == "chat template line 1: 'foo' is undefined (not a supported function)");
  CHECK(
      ErrorOf("{{ '%s' % 1 }}") ==
      "chat template line 1: unsupported operand types for %: 'str' and 'int' (% string formatting is not supported)");
  CHECK(ErrorOf("{{ 1 < 2 < 3 }}") == "chat template line 1: unsupported: chained comparison (a < b < c); use 'and'");
  CHECK(ErrorOf("{% for x in y recursive %}{% endfor %}") == "chat template line 1: unsupported: recursive for loops");
}

TEST_CASE("syntax errors name the line", "[chat]") {
  CHECK(ErrorOf("{% if x %}\nno end") == "chat template line 2: unexpected end of template: expected {% endif %}");
  CHECK(ErrorOf("a\n{{ x ") == "chat template line 2: unclosed tag (no }})");
  CHECK(ErrorOf("{# never closed") == "chat template line 1: unclosed comment {# ... (no #})");
  CHECK(ErrorOf("{{ 'abc }}") == "chat template line 1: unclosed string literal");
  CHECK(ErrorOf("{% endfor %}") ==
        "chat template line 1: unknown statement '{% endfor %}' (or a tag closed without its opening)");
  CHECK(ErrorOf("{{ a ; b }}") == "chat template line 1: unexpected character ';' in an expression");
  CHECK(ErrorOf("{% set x = %}") == "chat template line 1: unexpected '%}' in an expression");
}

TEST_CASE("runtime errors name the line and the value", "[chat]") {
  CHECK(ErrorOf("\n{{ missing.attr }}") == "chat template line 2: 'missing' is undefined");
  CHECK(ErrorOf("{{ 'a' + 1 }}") == "chat template line 1: unsupported operand types for +: 'str' and 'int'");
  CHECK(ErrorOf("{{ 'a' + nothing }}") == "chat template line 1: 'nothing' is undefined (in +)");
  CHECK(ErrorOf("{% set x = 1 %}{% set x.y = 2 %}") ==
        "chat template line 1: cannot set x.y: x is a int, not a namespace()");
  CHECK(ErrorOf("{{ 1 // 0 }}") == "chat template line 1: division by zero");
  CHECK(ErrorOf("{% for x in 3 %}{% endfor %}") == "chat template line 1: 'int' object is not iterable");
}

}  // namespace
}  // namespace ps::chat
