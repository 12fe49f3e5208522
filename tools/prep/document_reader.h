// Inputs -> documents, each with its file:line, in input order: a .jsonl/.ndjson input
// gives a document per non-blank line (its JSON, parsed later by DocumentText); a text
// input gives one per file, paragraph or line (Options::text_split). An unreadable input
// gives one Document carrying the error. Read on the main thread; DocumentText is pure
// and runs on the encoding threads.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "tools/prep/options.h"

namespace ps::prep {

struct Document {
  std::string text;         // the document (text input) or its JSON line (JSONL input)
  int32_t file_index = 0;   // into Options::inputs
  int64_t line = 0;         // 1-based line where it starts
  int64_t input_bytes = 0;  // input consumed, newlines included (progress)
  bool is_json = false;
  bool valid = false;       // belongs to the validation split
  std::string error;        // set by the reader for an unreadable input
};

class DocumentReader {
 public:
  // Keeps a reference to `opt`, which must outlive the reader.
  explicit DocumentReader(const Options& opt) : opt_(opt) {}

  // Calls `emit` with each document of the inputs in order. Deterministic: the split
  // needs the number of documents up front, so ps_prep reads twice (count, then encode).
  void ForEach(const std::function<void(Document&&)>& emit) const;

 private:
  void ReadFile(int32_t file_index, const std::function<void(Document&&)>& emit) const;

  const Options& opt_;
};

// Offset of the first byte that is not part of well-formed UTF-8 (no overlong forms,
// surrogates or code points above U+10FFFF), or -1.
int64_t FirstInvalidUtf8(std::string_view s);

// "file:line" of `d`, the start of its error messages.
std::string DocumentLocation(const Document& d, const Options& opt);

// The text to encode of `d`: its --jsonl-field string (stored in *field) or its own text,
// checked as UTF-8. Returns "" and sets *text, or returns the error, "file:line: what"
// (invalid UTF-8: the line and column of the bad byte); d.error when the reader set one.
std::string DocumentText(const Document& d, const Options& opt, std::string* field, std::string_view* text);

}  // namespace ps::prep
