// TempDir(): the folder a test may write to: Bazel's TEST_TMPDIR (fresh per test run),
// or /tmp when a test binary is run by hand.
#pragma once

#include <cstdlib>
#include <string>

namespace ps::testing {

inline std::string TempDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir ? dir : "/tmp";
}

}  // namespace ps::testing
