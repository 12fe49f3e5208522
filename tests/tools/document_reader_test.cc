// ps_prep's document reader (tools/prep/document_reader.h) and split: how text and JSONL
// inputs become documents with file:line, the bytes each consumes, and the errors bad
// input gets (file:line, column of invalid UTF-8). ps_prep end to end: ps_prep_test.sh.
#include "tools/prep/document_reader.h"

#include <fstream>
#include <vector>

#include "tests/catch.h"
#include "tests/temp_dir.h"
#include "tools/prep/outputs.h"

namespace ps::prep {
namespace {

std::string WriteFile(const std::string& name, const std::string& content) {
  const std::string path = ps::testing::TempDir() + "/" + name;
  std::ofstream(path, std::ios::binary) << content;
  return path;
}

std::vector<Document> Read(const Options& opt) {
  std::vector<Document> docs;
  DocumentReader(opt).ForEach([&](Document&& d) { docs.push_back(std::move(d)); });
  return docs;
}

// The document's text to encode, or its error.
std::string TextOrError(const Document& d, const Options& opt) {
  std::string field;
  std::string_view text;
  const std::string error = DocumentText(d, opt, &field, &text);
  return error.empty() ? std::string(text) : "error: " + error;
}

const char kText[] = "one\ntwo\r\n\n  \nthree\nfour\n";

TEST_CASE("text split modes: file, blank-line, line", "[prep]") {
  Options opt;
  opt.inputs = {WriteFile("a.txt", kText)};

  opt.text_split = TextSplit::kFile;
  std::vector<Document> docs = Read(opt);
  REQUIRE(docs.size() == 1);
  CHECK(docs[0].text == kText);
  CHECK(docs[0].line == 1);
  CHECK(docs[0].input_bytes == static_cast<int64_t>(sizeof(kText) - 1));

  opt.text_split = TextSplit::kBlankLine;
  docs = Read(opt);
  REQUIRE(docs.size() == 2);
  CHECK(docs[0].text == "one\ntwo");  // CRLF: "\r\n" is the newline
  CHECK(docs[0].line == 1);
  CHECK(docs[1].text == "three\nfour");
  CHECK(docs[1].line == 5);
  // Blank lines count with the next document: every byte is consumed once.
  CHECK(docs[0].input_bytes + docs[1].input_bytes == static_cast<int64_t>(sizeof(kText) - 1));

  opt.text_split = TextSplit::kLine;
  docs = Read(opt);
  REQUIRE(docs.size() == 4);
  CHECK(docs[2].text == "three");
  CHECK(docs[2].line == 5);
  CHECK_FALSE(docs[2].is_json);
}

TEST_CASE("JSONL: a document per line, its field; bad lines name file:line", "[prep]") {
  Options opt;
  opt.inputs = {WriteFile("b.jsonl", "{\"text\": \"hi\"}\n\nnot json\n[1]\n{\"body\": \"x\"}\n{\"text\": 3}\n")};
  opt.text_split = TextSplit::kFile;  // JSONL inputs ignore it
  const std::vector<Document> docs = Read(opt);
  REQUIRE(docs.size() == 5);
  CHECK(docs[0].is_json);
  CHECK(TextOrError(docs[0], opt) == "hi");
  CHECK_THAT(TextOrError(docs[1], opt), Catch::StartsWith("error: " + opt.inputs[0] + ":3: not a JSON line"));
  CHECK(TextOrError(docs[2], opt) == "error: " + opt.inputs[0] + ":4: not a JSON object");
  CHECK(TextOrError(docs[3], opt) == "error: " + opt.inputs[0] + ":5: no \"text\" field (--jsonl-field)");
  CHECK(TextOrError(docs[4], opt) == "error: " + opt.inputs[0] + ":6: a non-string \"text\" field (--jsonl-field)");
  opt.jsonl_field = "body";
  CHECK(TextOrError(docs[3], opt) == "x");
}

TEST_CASE("invalid UTF-8 is reported at its line and column", "[prep]") {
  Options opt;
  opt.inputs = {WriteFile("c.txt", "fine\nab\xC3(\n")};
  opt.text_split = TextSplit::kFile;
  const std::vector<Document> docs = Read(opt);
  REQUIRE(docs.size() == 1);
  CHECK(TextOrError(docs[0], opt) == "error: " + opt.inputs[0] + ":2: invalid UTF-8 (byte 0xC3 at column 3)");

  CHECK(FirstInvalidUtf8("plain ascii") == -1);
  CHECK(FirstInvalidUtf8("caf\xC3\xA9") == -1);
  CHECK(FirstInvalidUtf8("\xC0\x80") == 0);          // overlong
  CHECK(FirstInvalidUtf8("x\xED\xA0\x80") == 1);     // surrogate
  CHECK(FirstInvalidUtf8("\xF4\x90\x80\x80") == 0);  // above U+10FFFF
  CHECK(FirstInvalidUtf8("ab\xE2\x82") == 2);        // truncated
}

TEST_CASE("an unreadable input is one document carrying the error", "[prep]") {
  Options opt;
  opt.inputs = {ps::testing::TempDir() + "/missing.txt", ps::testing::TempDir()};
  const std::vector<Document> docs = Read(opt);
  REQUIRE(docs.size() == 2);
  CHECK_THAT(docs[0].error, Catch::Contains("missing.txt: cannot open"));
  CHECK_THAT(docs[1].error, Catch::Contains(": is a directory, not an input file"));
  CHECK(TextOrError(docs[1], opt) == "error: " + docs[1].error);
}

TEST_CASE("the validation split has its exact size, seeded", "[prep]") {
  Options opt;
  opt.valid_docs = 5;
  CHECK(ValidCount(opt, 100) == 5);
  CHECK(ValidCount(opt, 3) == 2);  // at most all but one
  opt.valid_docs = -1;
  opt.valid_fraction = 0.01;
  CHECK(ValidCount(opt, 10) == 1);  // at least 1
  CHECK(ValidCount(opt, 1) == 0);
  opt.valid_docs = 7;
  const auto chosen = [&](uint64_t seed) {
    opt.seed = seed;
    ValidSplit split(opt, 50);
    std::vector<int> out;
    for (int i = 0; i < 50; ++i) {
      if (split.Next()) out.push_back(i);
    }
    return out;
  };
  CHECK(chosen(1).size() == 7);
  CHECK(chosen(1) == chosen(1));
  CHECK(chosen(1) != chosen(2));
}

}  // namespace
}  // namespace ps::prep
