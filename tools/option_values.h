// Numeric command-line values of the tools (ps_prep, ps_sample), converted from their
// text and range-checked here so that every error names the option:
// "--threads 100000: must be in [1, 1024]". (cxxopts' own conversion errors name only
// the text: "Argument '-1' failed to parse".) The tools declare numeric options as
// strings and read them with these. Header-only; stateless.
#pragma once

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <stdexcept>
#include <string>

namespace ps::tools {

// A bad option value: the tools print it and exit with status 2.
class OptionError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The integer `text` of option `--name`, in [lo, hi] (hi = INT64_MAX: no upper bound).
inline int64_t IntOption(const std::string& name, const std::string& text, int64_t lo, int64_t hi) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE) {
    throw OptionError("--" + name + " " + text + ": expected an integer");
  }
  if (v < lo || v > hi) {
    const std::string range = hi == INT64_MAX ? ">= " + std::to_string(lo)
                                              : "in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
    throw OptionError("--" + name + " " + text + ": must be " + range);
  }
  return v;
}

// The unsigned 64-bit integer `text` of option `--name` (a seed): digits only.
inline uint64_t Uint64Option(const std::string& name, const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (text.empty() || text[0] < '0' || text[0] > '9' || *end != '\0' || errno == ERANGE) {
    throw OptionError("--" + name + " " + text + ": expected an integer in [0, 2^64 - 1]");
  }
  return v;
}

// The finite number `text` of option `--name`, in [lo, hi]; `range` spells the range
// for the message (e.g. "(0, 1]") and `in_range` decides it.
template <typename InRange>
double FloatOption(const std::string& name, const std::string& text, const std::string& range, InRange in_range) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !std::isfinite(v)) {
    throw OptionError("--" + name + " " + text + ": expected a number in " + range);
  }
  if (!in_range(v)) throw OptionError("--" + name + " " + text + ": must be in " + range);
  return v;
}

}  // namespace ps::tools
