// The parts of CheckRunCanStart (trainer/run_preflight.h) that do not need several
// processes: a directory's identity (one per directory, the same through another path
// to it, none for a missing one) and the bytes of the ranks that share it. The refusal
// itself, before anything is claimed: nvme_train_test ("a refused plan claims nothing").
#include "trainer/run_preflight.h"

#include <filesystem>
#include <string>
#include <vector>

#include "tests/temp_dir.h"
#include "tests/catch.h"

namespace ps::trainer {
namespace {

TEST_CASE("directory identity: one per directory, whatever the path; none for a missing one", "[preflight]") {
  namespace fs = std::filesystem;
  const std::string a = testing::TempDir() + "/preflight_a", b = testing::TempDir() + "/preflight_b";
  fs::create_directories(a + "/sub");
  fs::create_directories(b);
  const std::string id = DirectoryIdentity(a);
  CHECK_FALSE(id.empty());
  CHECK(DirectoryIdentity(a + "/sub/..") == id);
  CHECK(DirectoryIdentity(b) != id);
  CHECK(DirectoryIdentity(a + "/missing").empty());
  CHECK(DirectoryIdentity("").empty());
}

TEST_CASE("the bytes of the ranks sharing a directory", "[preflight]") {
  const std::vector<std::string> entries = {"100 h:1:2", "250 h:1:3", "40 h:1:2", "7 ", "0 h:1:2"};
  int ranks = -1;
  CHECK(BytesSharingDirectory(entries, "h:1:2", &ranks) == 140);
  CHECK(ranks == 3);
  CHECK(BytesSharingDirectory(entries, "h:1:3", &ranks) == 250);
  CHECK(ranks == 1);
  CHECK(BytesSharingDirectory(entries, "g:1:2", &ranks) == 0);
  CHECK(ranks == 0);
}

}  // namespace
}  // namespace ps::trainer
