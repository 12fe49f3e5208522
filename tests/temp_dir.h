// TempDir(): the folder a test may write to: Bazel's TEST_TMPDIR (fresh per test run),
// or /tmp when a test binary is run by hand. WriteRepeatedText(): a small training corpus
// there (the trainer tests' byte-level text).
#pragma once

#include <cstdlib>
#include <fstream>
#include <string>

namespace ps::testing {

inline std::string TempDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir ? dir : "/tmp";
}

// Writes `sentence` `repeats` times to TempDir()/file_name, each followed by its index and
// a space when `numbered` (so no two windows are identical); returns the path.
inline std::string WriteRepeatedText(const std::string& file_name, int repeats,
                                     const std::string& sentence = "the cat sat on the mat. the dog ran to the log. ",
                                     bool numbered = true) {
  const std::string path = TempDir() + "/" + file_name;
  std::ofstream out(path);
  for (int i = 0; i < repeats; ++i) {
    out << sentence;
    if (numbered) out << i << " ";
  }
  return path;
}

}  // namespace ps::testing
