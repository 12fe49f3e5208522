#include "trainer/logging/metrics.h"

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
  numeric_fields_.emplace_back(key, value);
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
  numeric_fields_.emplace_back(key, static_cast<double>(value));
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

void MetricsWriter::Write(const JsonLine& line) { out_.WriteRecord(line.str() + "\n"); }

double TrainingFlopsPerToken(int64_t n_params, int64_t n_frozen, int64_t n_layer, int64_t attention_width,
                             int64_t seq_len) {
  return 6.0 * static_cast<double>(n_params) - 2.0 * static_cast<double>(n_frozen) +
         12.0 * static_cast<double>(n_layer) * static_cast<double>(attention_width) * static_cast<double>(seq_len);
}

double Perplexity(double mean_loss) { return std::exp(mean_loss); }

std::string FormatDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto s = static_cast<int64_t>(seconds);
  char buf[48];
  if (s < 60) {
    std::snprintf(buf, sizeof(buf), "%llds", static_cast<long long>(s));
  } else if (s < 3600) {
    std::snprintf(buf, sizeof(buf), "%lldm%02llds", static_cast<long long>(s / 60), static_cast<long long>(s % 60));
  } else if (s < 86400) {
    std::snprintf(buf, sizeof(buf), "%lldh%02lldm", static_cast<long long>(s / 3600),
                  static_cast<long long>(s % 3600 / 60));
  } else {
    std::snprintf(buf, sizeof(buf), "%lldd%02lldh", static_cast<long long>(s / 86400),
                  static_cast<long long>(s % 86400 / 3600));
  }
  return buf;
}

std::string FormatThousands(double value) {
  if (!std::isfinite(value)) return std::isnan(value) ? "nan" : (value > 0 ? "inf" : "-inf");
  if (std::abs(value) >= 1e18) {  // beyond long long's digits: no separators
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.3g", value);
    return buf;
  }
  const long long rounded = std::llround(value);
  const std::string digits = std::to_string(rounded < 0 ? -rounded : rounded);
  std::string out = rounded < 0 ? "-" : "";
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string FormatStepLine(const StepLine& s) {
  const int64_t percent = s.max_steps > 0 ? s.step * 100 / s.max_steps : 0;
  char buf[256];
  std::snprintf(buf, sizeof(buf),
                "step %lld/%lld (%lld%%) | loss %.4f | lr %.3e | norm %.3f | %.0f ms | %s tok/s | %.3f TFLOPS | ETA %s",
                static_cast<long long>(s.step), static_cast<long long>(s.max_steps), static_cast<long long>(percent),
                s.loss, s.lr, s.grad_norm, s.step_ms, FormatThousands(s.tokens_per_s).c_str(), s.tflops,
                FormatDuration(s.eta_s).c_str());
  return buf;
}

}  // namespace ps::trainer
