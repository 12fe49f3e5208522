#include "tools/prep/document_reader.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

namespace ps::prep {
namespace {

bool IsJsonl(const std::string& path) {
  const std::string ext = std::filesystem::path(path).extension().string();
  return ext == ".jsonl" || ext == ".ndjson";
}

bool IsBlank(const std::string& line) {
  return line.find_first_not_of(" \t\r") == std::string::npos;
}

Document MakeDocument(int32_t f, int64_t line, std::string text) {
  Document d;
  d.file_index = f;
  d.line = line;
  d.text = std::move(text);
  return d;
}

Document ErrorDocument(int32_t f, std::string error) {
  Document d = MakeDocument(f, 0, "");
  d.error = std::move(error);
  return d;
}

}  // namespace

void DocumentReader::ForEach(const std::function<void(Document&&)>& emit) const {
  for (int32_t f = 0; f < static_cast<int32_t>(opt_.inputs.size()); ++f) ReadFile(f, emit);
}

void DocumentReader::ReadFile(int32_t f, const std::function<void(Document&&)>& emit) const {
  const std::string& path = opt_.inputs[f];
  std::error_code ec;
  std::ifstream in;
  if (std::filesystem::is_directory(path, ec)) {
    emit(ErrorDocument(f, path + ": is a directory, not an input file"));
    return;
  }
  in.open(path, std::ios::binary);
  if (!in) {
    emit(ErrorDocument(f, path + ": cannot open: " + std::strerror(errno)));
    return;
  }
  const bool json = IsJsonl(path);
  if (!json && opt_.text_split == TextSplit::kFile) {
    std::ostringstream all;
    all << in.rdbuf();
    Document d = MakeDocument(f, 1, all.str());
    d.input_bytes = static_cast<int64_t>(d.text.size());
    if (!d.text.empty()) emit(std::move(d));
    return;
  }
  std::string line;
  Document para;  // blank-line mode: the paragraph being gathered
  int64_t line_no = 0, blank_bytes = 0;  // blank lines count with the next document
  while (std::getline(in, line)) {
    ++line_no;
    const int64_t bytes = static_cast<int64_t>(line.size()) + 1;
    if (!line.empty() && line.back() == '\r') line.pop_back();  // CRLF: the newline is "\r\n"
    if (json || opt_.text_split == TextSplit::kLine) {
      if (IsBlank(line)) {
        blank_bytes += bytes;
        continue;
      }
      Document d = MakeDocument(f, line_no, std::move(line));
      d.is_json = json;
      d.input_bytes = bytes + blank_bytes;
      blank_bytes = 0;
      emit(std::move(d));
      continue;
    }
    if (IsBlank(line)) {
      if (!para.text.empty()) emit(std::move(para));
      para = Document();
      blank_bytes += bytes;
      continue;
    }
    if (para.text.empty()) para = MakeDocument(f, line_no, "");
    else para.text += '\n';
    para.text += line;
    para.input_bytes += bytes + blank_bytes;
    blank_bytes = 0;
  }
  if (!para.text.empty()) emit(std::move(para));
}

int64_t FirstInvalidUtf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const int64_t n = static_cast<int64_t>(s.size());
  int64_t i = 0;
  while (i < n) {
    const unsigned char c = p[i];
    if (c < 0x80) { ++i; continue; }
    int len = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c >= 0xE0 && c <= 0xEF) { len = 3; if (c == 0xE0) lo = 0xA0; if (c == 0xED) hi = 0x9F; }
    else if (c >= 0xF0 && c <= 0xF4) { len = 4; if (c == 0xF0) lo = 0x90; if (c == 0xF4) hi = 0x8F; }
    else return i;
    if (i + len > n || p[i + 1] < lo || p[i + 1] > hi) return i;
    for (int k = 2; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return i;
    }
    i += len;
  }
  return -1;
}

std::string DocumentLocation(const Document& d, const Options& opt) {
  return opt.inputs[d.file_index] + ":" + std::to_string(d.line);
}

std::string DocumentText(const Document& d, const Options& opt, std::string* field, std::string_view* text) {
  if (!d.error.empty()) return d.error;
  *text = d.text;
  if (d.is_json) {
    const std::string where = DocumentLocation(d, opt);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(d.text);
    } catch (const nlohmann::json::exception& e) {
      return where + ": not a JSON line: " + e.what();
    }
    if (!j.is_object()) return where + ": not a JSON object";
    const auto it = j.find(opt.jsonl_field);
    if (it == j.end() || !it->is_string()) {
      return where + ": " + (it == j.end() ? "no" : "a non-string") + " \"" + opt.jsonl_field +
             "\" field (--jsonl-field)";
    }
    *field = it->get<std::string>();  // UTF-8 checked by the JSON parser
    *text = *field;
    return "";
  }
  const int64_t bad = FirstInvalidUtf8(*text);
  if (bad < 0) return "";
  const std::string_view t = *text;
  const int64_t line = d.line + std::count(t.begin(), t.begin() + bad, '\n');
  const int64_t line_start =
      t.rfind('\n', bad) == std::string_view::npos ? 0 : static_cast<int64_t>(t.rfind('\n', bad)) + 1;
  char byte[8];
  std::snprintf(byte, sizeof(byte), "0x%02X", static_cast<unsigned char>(t[bad]));
  return opt.inputs[d.file_index] + ":" + std::to_string(line) + ": invalid UTF-8 (byte " + byte + " at column " +
         std::to_string(bad - line_start + 1) + ")";
}

}  // namespace ps::prep
