// Vocabulary: ids from a model vocabulary and added tokens, gaps, replacement by later
// entries, the added-token text hook and the errors naming the source file.
#include "tokenizer/vocabulary.h"

#include "tests/catch.h"

namespace ps::tokenizer {
namespace {

AddedToken Added(const std::string& content, int32_t id, bool normalized) {
  AddedToken t;
  t.content = content;
  t.id = id;
  t.normalized = normalized;
  return t;
}

TEST_CASE("Vocabulary maps ids and tokens both ways", "[tokenizer]") {
  const Vocabulary v({{"a", 0}, {"b", 1}, {"##c", 3}}, {Added("<eos>", 5, false)}, {"vocab.txt"});
  CHECK(v.vocab_size() == 6);
  CHECK(v.Has(3));
  CHECK_FALSE(v.Has(2));  // a gap: no token has id 2
  CHECK_FALSE(v.Has(-1));
  CHECK_FALSE(v.Has(6));
  CHECK(v.token(3) == "##c");
  CHECK(v.TokenToId("<eos>") == 5);
  CHECK(v.TokenToId("b") == 1);
  CHECK_FALSE(v.TokenToId("z").has_value());
  // The model's own lookups see no added token.
  CHECK(v.model_tokens().Find("b") == 1);
  CHECK(v.model_tokens().Find("<eos>") == -1);
  CHECK(v.source_files() == std::vector<std::string>{"vocab.txt"});
}

TEST_CASE("Vocabulary: added tokens replace model entries; their text can differ", "[tokenizer]") {
  const auto lower = [](const AddedToken& t) { return t.normalized ? std::string("hello") : t.content; };
  const Vocabulary v({{"a", 0}, {"b", 1}}, {Added("B", 1, false), Added("Hello", 2, true)}, {"f.json"}, lower);
  CHECK(v.token(1) == "B");
  CHECK(v.token(2) == "hello");         // an id gives the hook's text
  CHECK(v.TokenToId("Hello") == 2);     // the written content gives the id
  CHECK_FALSE(v.TokenToId("hello").has_value());
  CHECK(v.model_tokens().Find("b") == 1);
}

TEST_CASE("Vocabulary errors name the source file", "[tokenizer]") {
  const auto message = [](auto&& f) {
    try {
      f();
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK_THAT(message([] { Vocabulary({{"a", -2}}, {}, {"v.json"}); }),
             Catch::Contains("v.json: negative id -2 of token 'a'"));
  CHECK_THAT(message([] { Vocabulary({}, {Added("x", -1, false)}, {"t.json"}); }),
             Catch::Contains("t.json: added token 'x' has a negative id"));
  const Vocabulary v({{"a", 0}, {"c", 2}}, {}, {"v.json"});
  CHECK_NOTHROW(v.CheckId(2));
  CHECK_THAT(message([&] { v.CheckId(1); }), Catch::Contains("id 1 is not in the vocabulary of v.json (3 ids)"));
}

}  // namespace
}  // namespace ps::tokenizer
