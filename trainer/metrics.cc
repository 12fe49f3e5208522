#include "trainer/metrics.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace ps::trainer {

void JsonLine::Key(const std::string& key) {
  if (!body_.empty()) body_ += ", ";
  body_ += "\"" + key + "\": ";
}

JsonLine& JsonLine::Add(const std::string& key, double value) {
  Key(key);
  if (!std::isfinite(value)) {
    body_ += "null";
  } else {
    // The shortest text that reads back as the same double: losses compare bitwise.
    char buf[32];
    const auto r = std::to_chars(buf, buf + sizeof(buf), value);
    body_.append(buf, r.ptr);
  }
  return *this;
}

JsonLine& JsonLine::Add(const std::string& key, int64_t value) {
  Key(key);
  body_ += std::to_string(value);
  return *this;
}

JsonLine& JsonLine::Add(const std::string& key, bool value) {
  Key(key);
  body_ += value ? "true" : "false";
  return *this;
}

JsonLine& JsonLine::Add(const std::string& key, const std::string& value) {
  Key(key);
  body_ += '"';
  for (char c : value) {
    if (c == '"' || c == '\\') {
      body_ += '\\';
      body_ += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      body_ += buf;
    } else {
      body_ += c;
    }
  }
  body_ += '"';
  return *this;
}

MetricsWriter::MetricsWriter(const std::string& path) : out_(path, CheckedFile::Mode::kAppend) {}

void MetricsWriter::Write(const JsonLine& line) { out_.Write(line.str() + "\n"); }

double TrainingFlopsPerToken(int64_t n_params, int64_t n_layer, int64_t n_embd, int64_t seq_len) {
  return 6.0 * static_cast<double>(n_params) +
         12.0 * static_cast<double>(n_layer) * static_cast<double>(n_embd) * static_cast<double>(seq_len);
}

}  // namespace ps::trainer
