// A full disk stops a run loudly and keeps what was saved: metrics writes and
// checkpoint writes are checked (ENOSPC from /dev/full; EFBIG from a file-size limit in
// a child process, standing in for a disk that fills during a checkpoint), the run
// fails with an error naming the file, the partial checkpoint is removed and the last
// complete checkpoint still verifies.
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include "tests/file_size_limit.h"
#include "tests/temp_dir.h"
#include "tests/trainer/killed_run.h"
#include "trainer/config/config_loader.h"
#include "trainer/io/checkpoint.h"
#include "trainer/logging/metrics.h"
#include "trainer/train_loop.h"
// Last: c10 headers define a glog-style CHECK that Catch must override.
#include "tests/catch.h"

namespace ps::trainer {
namespace {

namespace fs = std::filesystem;

using testing::TempDir;

TEST_CASE("metrics.jsonl on a full disk: the write throws, naming the file", "[disk_full]") {
  MetricsWriter metrics("/dev/full");
  CHECK_THROWS_WITH(metrics.Write(JsonLine().Add("step", int64_t{1})),
                    Catch::Contains("/dev/full") && Catch::Contains("No space left on device"));
}

TEST_CASE("metrics.jsonl filling up: the failed line is taken back, whole lines stay", "[disk_full]") {
  const std::string path = TempDir() + "/filling_metrics.jsonl";
  fs::remove(path);
  // Lines of 40-odd bytes against a limit of 1000: one write is cut by the limit.
  const int status = testing::RunWithFileSizeLimit(1000, [&] {
    MetricsWriter metrics(path);
    for (int64_t step = 1; step < 1000; ++step) {
      try {
        metrics.Write(JsonLine().Add("step", step).Add("loss", 2.9361234567).Add("note", std::string("abc")));
      } catch (const std::runtime_error& e) {
        return std::string(e.what()).find(path) != std::string::npos && step > 1 ? 0 : 2;
      }
    }
    return 3;  // never failed
  });
  REQUIRE(status == 0);
  std::ifstream in(path, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  REQUIRE(!text.empty());
  CHECK(text.back() == '\n');  // no cut line at the end
  CHECK(text.size() < 1000);
  std::istringstream lines(text);
  int64_t expected = 1;
  for (std::string line; std::getline(lines, line); ++expected) {
    INFO(line);
    CHECK(line == "{\"step\": " + std::to_string(expected) + ", \"loss\": 2.9361234567, \"note\": \"abc\"}");
  }
}

TEST_CASE("a run whose checkpoint does not fit the disk fails; the earlier checkpoint stays valid", "[disk_full]") {
  const std::string corpus = TempDir() + "/disk_corpus.txt";
  {
    std::ofstream out(corpus);
    for (int i = 0; i < 200; ++i) out << "the cat sat on the mat. " << i << " ";
  }
  const std::string dir = TempDir() + "/disk_full";
  const Config c = LoadConfigText(
      "model: {n_layer: 2, n_head: 2, n_embd: 64, n_positions: 32, vocab_size: 256}\n"
      "data: {format: text, seq_len: 32}\n"
      "train: {micro_batch_size: 2, global_batch_size: 2, max_steps: 6}\n"
      "logging: {level: error}\n"
      "checkpoint: {every_steps: 3, async: false}\n",
      "test.yaml", {"data.train_path=" + corpus, "run.output_dir=" + dir, "run.threads=1"}, ProcessEnv());
  testing::TrainKilledAfter(c, 4);  // leaves a complete checkpoint at step 3
  const std::string saved = dir + "/checkpoints/step_3";
  REQUIRE(fs::exists(saved + "/state.json"));
  const int64_t checkpoint_bytes = static_cast<int64_t>(fs::file_size(saved + "/optimizer.safetensors"));

  // The resumed run's next checkpoint cannot be written whole (files are limited to a quarter
  // of one): in a child process, so the limit does not reach this one.
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    signal(SIGXFSZ, SIG_IGN);  // write() returns EFBIG instead of killing the process
    const rlim_t limit = static_cast<rlim_t>(checkpoint_bytes / 4);
    struct rlimit rl = {limit, limit};
    setrlimit(RLIMIT_FSIZE, &rl);
    try {
      Train(c);
    } catch (const std::runtime_error& e) {
      const std::string what = e.what();
      _exit(what.find("File too large") != std::string::npos && what.find(".safetensors") != std::string::npos ? 0 : 3);
    } catch (...) {
      _exit(4);
    }
    _exit(5);  // no error: the run went on as if nothing happened
  }
  int status = 0;
  waitpid(child, &status, 0);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  // Nothing half-written is left for resume to find, and the step-3 checkpoint verifies.
  for (const auto& entry : fs::directory_iterator(dir + "/checkpoints")) {
    INFO(entry.path());
    CHECK(entry.path().filename().string().rfind(".tmp_", 0) != 0);
  }
  CHECK(ListCheckpoints(dir + "/checkpoints").front() == saved);
  CHECK(ReadCheckpoint(saved).step == 3);
}

}  // namespace
}  // namespace ps::trainer
