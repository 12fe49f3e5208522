// Tokenizers against HF `tokenizers`: the golden ids and decoded texts of
// testdata/golden.json (written by tools/gen_tokenizer_fixtures.py), for every way of
// loading each tokenizer; the GPT-2 scanner against the ICU regex; errors; threads.
#include "tokenizer/tokenizer.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "tests/catch.h"
#include "tests/tokenizer/concurrent_encode.h"
#include "tests/temp_dir.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"
#include "tokenizer/wordpiece.h"

namespace ps::tokenizer {
namespace {

using nlohmann::json;
const std::string kData = "tests/tokenizer/testdata/";

const json& Golden() {
  static const json golden = [] {
    std::ifstream in(kData + "golden.json");
    REQUIRE(in.good());
    return json::parse(in);
  }();
  return golden;
}

// Every golden case of `name` through `tok`.
void CheckGolden(const Tokenizer& tok, const std::string& name) {
  const json& g = Golden().at(name);
  CHECK(tok.vocab_size() == g.at("vocab_size").get<int64_t>());
  for (const json& c : g.at("encode")) {
    const std::string text = c.at("text");
    INFO("encode " << json(text).dump());
    CHECK(tok.Encode(text) == c.at("ids").get<std::vector<int32_t>>());
  }
  for (const json& c : g.at("decode")) {
    const auto ids = c.at("ids").get<std::vector<int32_t>>();
    INFO("decode " << json(ids).dump());
    CHECK(tok.Decode(ids) == c.at("text").get<std::string>());
  }
}

std::string WriteTemp(const std::string& name, const std::string& content) {
  const std::string path = ps::testing::TempDir() + "/" + name;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path) << content;
  return path;
}

json ReadJson(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);
}

std::string ErrorOf(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST_CASE("byte-level BPE matches HF on the golden cases", "[tokenizer]") {
  for (const std::string path : {"bpe", "bpe/tokenizer.json", "bpe/vocab.json", "bpe/merges.txt"}) {
    INFO("loaded from " << path);
    auto tok = LoadTokenizer(kData + path);
    CHECK(tok->kind() == TokenizerKind::kByteLevelBpe);
    CHECK(tok->end_of_text_id() == std::optional<int32_t>(0));
    CheckGolden(*tok, "bpe");
  }
}

TEST_CASE("byte-level BPE reads the older string merges and a Sequence pre-tokenizer", "[tokenizer]") {
  json j = ReadJson(kData + "bpe/tokenizer.json");
  json merges = json::array();
  for (const json& m : j["model"]["merges"])
    merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
  j["model"]["merges"] = merges;
  j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", json::array({j["pre_tokenizer"]})}};
  CheckGolden(*LoadTokenizer(WriteTemp("legacy/tokenizer.json", j.dump())), "bpe");

  // The GPT-2 pattern as an explicit Split followed by ByteLevel without its regex goes
  // through ICU: the same ids.
  json split = j;
  json byte_level = ReadJson(kData + "bpe/tokenizer.json")["pre_tokenizer"];
  byte_level["use_regex"] = false;
  split["pre_tokenizer"]["pretokenizers"] = json::array({{{"type", "Split"},
                                                          {"pattern", {{"Regex", kGpt2Pattern}}},
                                                          {"behavior", "Isolated"},
                                                          {"invert", false}},
                                                         byte_level});
  CheckGolden(*LoadTokenizer(WriteTemp("split/tokenizer.json", split.dump())), "bpe");
}

TEST_CASE("WordPiece matches HF on the golden cases", "[tokenizer]") {
  for (const std::string name : {"wordpiece_uncased", "wordpiece_cased"}) {
    for (const std::string file : {"", "/tokenizer.json", "/vocab.txt"}) {
      INFO("loaded from " << name << file);
      auto tok = LoadTokenizer(kData + name + file);
      CHECK(tok->kind() == TokenizerKind::kWordPiece);
      CHECK(tok->end_of_text_id() == tok->TokenToId("[SEP]"));
      CheckGolden(*tok, name);
    }
  }
}

TEST_CASE("a Split regex before ByteLevel (Llama 3's) and ignore_merges match HF", "[tokenizer]") {
  CheckGolden(*LoadTokenizer(kData + "bpe_split"), "bpe_split");
}

TEST_CASE("added-token flags and add_prefix_space match HF", "[tokenizer]") {
  // <mask>: lstrip, not normalized; xyzzy: single_word, normalized; "Hello World": rstrip,
  // normalized (so matched lowercased by the uncased WordPiece).
  for (const std::string name : {"bpe_flags", "wordpiece_flags"}) {
    INFO(name);
    CheckGolden(*LoadTokenizer(kData + name), name);
  }
}

TEST_CASE("the GPT-2 scanner splits as the ICU regex does", "[tokenizer]") {
  const RegexSplitter regex(kGpt2Pattern);
  auto same = [&](const std::string& text) {
    std::vector<std::string_view> fast, reference;
    SplitGpt2(text, &fast);
    regex.Split(text, &reference);
    INFO(json(text).dump());
    REQUIRE(fast == reference);
  };
  for (const json& c : Golden().at("bpe").at("encode")) same(c.at("text"));
  // Random strings over the characters where the alternatives meet.
  const std::vector<std::string> alphabet = {
      " ", "  ", "\t", "\n", "\r\n", "\u00a0", "\u3000", "\u0085", "\v", "a", "Z", "é", "e\u0301", "東",
      "1", "٣",  "²",  "Ⅻ",  "'",    "'s",     "'re",    "'ll",    "!",  "-", "😀", "_", "\u200b",  "x'"};
  std::mt19937 rng(5);
  for (int i = 0; i < 3000; ++i) {
    std::string text;
    const int n = rng() % 12;
    for (int k = 0; k < n; ++k) text += alphabet[rng() % alphabet.size()];
    same(text);
  }
}

TEST_CASE("lossy UTF-8 decoding replaces each maximal invalid subpart", "[tokenizer]") {
  CHECK(Utf8Lossy("abc") == "abc");
  CHECK(Utf8Lossy("\xE2\x82") == "\uFFFD");  // truncated: one U+FFFD
  CHECK(Utf8Lossy("\xE2\x82"
                  "a") ==
        "\uFFFD"
        "a");
  CHECK(Utf8Lossy("\xF0\x9F\x98") == "\uFFFD");
  CHECK(Utf8Lossy("\xC0\x80") == "\uFFFD\uFFFD");            // overlong: every byte
  CHECK(Utf8Lossy("\xED\xA0\x80") == "\uFFFD\uFFFD\uFFFD");  // surrogate
  CHECK(Utf8Lossy("\xF4\x90\x80\x80") == "\uFFFD\uFFFD\uFFFD\uFFFD");
  CHECK(Utf8Lossy("\x80\xFF"
                  "\xC3\xA9") ==
        "\uFFFD\uFFFD"
        "é");
  CHECK(FindInvalidUtf8("hello wörld") == std::string_view::npos);
  CHECK(FindInvalidUtf8(std::string("0123456789\xC3", 11)) == 10);
}

TEST_CASE("errors name the file, the offset or the id", "[tokenizer]") {
  auto bpe = LoadTokenizer(kData + "bpe");
  auto wp = LoadTokenizer(kData + "wordpiece_uncased");
  for (const Tokenizer* tok : {bpe.get(), wp.get()}) {
    const std::string e = ErrorOf([&] { tok->Encode("hello\xFFworld"); });
    CHECK_THAT(e, Catch::Contains("invalid UTF-8 at byte offset 5"));
    CHECK_THAT(ErrorOf([&] { tok->Encode("ab\xE2\x82"); }), Catch::Contains("offset 2"));
    CHECK_THAT(ErrorOf([&] { tok->Decode({1, 999999}); }), Catch::Contains("id 999999"));
    CHECK_THAT(ErrorOf([&] { tok->Decode({-1}); }), Catch::Contains("id -1"));
    CHECK_THAT(ErrorOf([&] { tok->IdToToken(123456); }), Catch::Contains("id 123456"));
  }

  CHECK_THAT(ErrorOf([] { LoadTokenizer("/nonexistent/tok"); }),
             Catch::Contains("/nonexistent/tok: no such tokenizer file or folder"));
  const std::string empty_dir = ps::testing::TempDir() + "/empty_tokenizer";
  std::filesystem::create_directories(empty_dir);
  CHECK_THAT(ErrorOf([&] { LoadTokenizer(empty_dir); }), Catch::Contains("no tokenizer.json"));

  const std::string bad = WriteTemp("bad/tokenizer.json", "{\n  \"model\": {\n    \"type\": \"BPE\",,\n}");
  const std::string e = ErrorOf([&] { LoadTokenizer(bad); });
  CHECK_THAT(e, Catch::Contains(bad + ": malformed JSON"));
  CHECK_THAT(e, Catch::Contains("line 3"));

  json j = ReadJson(kData + "bpe/tokenizer.json");
  j["model"]["type"] = "Unigram";
  CHECK_THAT(ErrorOf([&] { LoadTokenizer(WriteTemp("unigram/tokenizer.json", j.dump())); }),
             Catch::Contains("unsupported model type 'Unigram'"));
  j = ReadJson(kData + "bpe/tokenizer.json");
  j["pre_tokenizer"] = {{"type", "Whitespace"}};
  CHECK_THAT(ErrorOf([&] { LoadTokenizer(WriteTemp("ws/tokenizer.json", j.dump())); }),
             Catch::Contains("unsupported pre_tokenizer 'Whitespace'"));
  j = ReadJson(kData + "bpe/tokenizer.json");
  j["model"]["merges"].push_back(json::array({"Ġthe", "zzz_missing"}));
  const std::string merges_error =
      ErrorOf([&] { LoadTokenizer(WriteTemp("merge/tokenizer.json", j.dump())); });
  CHECK_THAT(merges_error, Catch::Contains("merge/tokenizer.json: merge "));
  CHECK_THAT(merges_error, Catch::Contains("'zzz_missing'"));

  WriteTemp("badmerges/vocab.json", "{\"a\": 0, \"b\": 1}");
  const std::string merges_txt = WriteTemp("badmerges/merges.txt", "#version: 0.2\na b c\n");
  CHECK_THAT(ErrorOf([&] { LoadTokenizer(merges_txt); }), Catch::Contains("merges.txt:2: 'a b c'"));
  const std::string lone = WriteTemp("lonevocab/vocab.json", "{\"a\": 0}");
  CHECK_THAT(ErrorOf([&] { LoadTokenizer(lone); }), Catch::Contains("merges.txt: missing"));
}

TEST_CASE("source files, vocabulary lookups", "[tokenizer]") {
  auto bpe = LoadTokenizer(kData + "bpe/vocab.json");
  CHECK(bpe->source_files() == std::vector<std::string>{kData + "bpe/vocab.json", kData + "bpe/merges.txt"});
  auto cased = LoadTokenizer(kData + "wordpiece_cased/vocab.txt");
  CHECK(cased->source_files() == std::vector<std::string>{kData + "wordpiece_cased/vocab.txt",
                                                          kData + "wordpiece_cased/tokenizer_config.json"});
  const int32_t the = bpe->Encode(" the").at(0);
  CHECK(bpe->IdToToken(the) == "Ġthe");
  CHECK(bpe->TokenToId("Ġthe") == the);
  CHECK(bpe->TokenToId("no such token") == std::nullopt);
  CHECK(std::string(ToString(bpe->kind())) == "byte_level_bpe");
  CHECK(std::string(ToString(cased->kind())) == "wordpiece");
}

TEST_CASE("the BERT normaliser", "[tokenizer]") {
  BertNormalizerConfig uncased;
  CHECK(BertNormalize(uncased, "Héllo\tWÖRLD\x01東京") == "hello world 東  京 ");
  BertNormalizerConfig cased;
  cased.lowercase = false;
  CHECK(BertNormalize(cased, "Héllo") == "Héllo");
  cased.strip_accents = true;
  CHECK(BertNormalize(cased, "Héllo") == "Hello");
}

TEST_CASE("encoding from many threads gives the single-threaded ids", "[tokenizer]") {
  for (const std::string name : {"bpe", "wordpiece_uncased"}) {
    auto tok = LoadTokenizer(kData + name);
    std::vector<std::string> texts;
    for (const json& c : Golden().at(name).at("encode")) texts.push_back(c.at("text"));
    std::vector<std::vector<int32_t>> expected;
    for (const auto& t : texts) expected.push_back(tok->Encode(t));
    CHECK(testing::ConcurrentEncodeMismatches(*tok, texts, expected, /*threads=*/8, /*rounds=*/20) == 0);
  }
}

}  // namespace
}  // namespace ps::tokenizer
