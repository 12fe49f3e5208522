// One owner per folder, and nothing saved is lost to another run, an edited manifest or
// an export (issue #26 §1-§3), through Train() and the export functions:
// - a second start on a run folder (or a checkpoint.dir) held by a live process fails at
//   once naming the holder's pid, in this process and from another one; a killed holder
//   leaves no stale lock;
// - two runs sharing a checkpoint.dir: the second refuses the first's checkpoints unless
//   checkpoint.resume names one, and its pruning never deletes them;
// - an edited manifest in the newest checkpoint: resume: auto falls back to the previous
//   one and no valid checkpoint changes;
// - checkpoint.export_hf and ps_export's path never replace a user's folder or file, a
//   folder of checkpoints, the run folder or the checkpoint exported.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>

#include "tests/temp_dir.h"
#include "tests/trainer/killed_run.h"
#include "trainer/config/config_loader.h"
#include "trainer/io/checkpoint.h"
#include "trainer/io/file_io.h"
#include "trainer/io/hf_io.h"
#include "trainer/io/run_lock.h"
#include "trainer/train_loop.h"
// Last: c10 headers define a glog-style CHECK that Catch must override.
#include "tests/catch.h"

namespace ps::trainer {
namespace {

namespace fs = std::filesystem;

using testing::TempDir;

// A 1-layer byte-level GPT for `steps` steps in TempDir()/<name>.
Config Tiny(const std::string& name, std::vector<std::string> extra = {}) {
  std::vector<std::string> overrides = {"data.train_path=" + testing::WriteRepeatedText("own_corpus.txt", 100),
                                        "run.output_dir=" + TempDir() + "/" + name, "run.threads=1"};
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  return LoadConfigText("model: {n_layer: 1, n_head: 2, n_embd: 32, n_positions: 32, vocab_size: 256}\n"
                        "data: {format: text, seq_len: 16}\n"
                        "train: {micro_batch_size: 2, global_batch_size: 2, max_steps: 4}\n"
                        "checkpoint: {every_steps: 2, keep: 10, async: false}\n"
                        "logging: {level: error}\n",
                        "test.yaml", overrides, ProcessEnv());
}

// Every file under `dir` (relative path -> contents) but the lock files, which name
// whoever holds them.
std::map<std::string, std::string> Snapshot(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file() || e.path().filename() == ".ps_train.lock") continue;
    const std::vector<char> bytes = ReadWholeFile(e.path().string());
    out[fs::relative(e.path(), dir).string()] = std::string(bytes.begin(), bytes.end());
  }
  return out;
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

TEST_CASE("a run folder held by a live run: a second start fails at once, naming the holder", "[ownership][lock]") {
  const Config c = Tiny("locked");
  const std::string pid = "pid " + std::to_string(getpid());
  {
    FolderLock held(c.run.output_dir, "run.output_dir");
    CHECK_THROWS_AS(Train(c), ConfigError);
    CHECK_THROWS_WITH(Train(c), Catch::Contains("run.output_dir " + c.run.output_dir + " is in use by another ps_train (" +
                                                pid + " on host"));
    CHECK_FALSE(fs::exists(c.run.output_dir + "/metrics.jsonl"));  // nothing written
    // From another process, as a second ps_train would see it.
    const pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      try {
        FolderLock second(c.run.output_dir, "run.output_dir");
      } catch (const ConfigError& e) {
        _exit(std::string(e.what()).find(pid) != std::string::npos ? 0 : 2);
      } catch (...) {
        _exit(3);
      }
      _exit(4);  // it got the lock
    }
    int status = 0;
    waitpid(child, &status, 0);
    CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  }
  CHECK(Train(c).losses.size() == 4);  // released with its holder
}

TEST_CASE("a checkpoint.dir outside the run folder is locked too", "[ownership][lock]") {
  const std::string shared = TempDir() + "/locked_shared_ckpts";
  const Config c = Tiny("locked_ckpt", {"checkpoint.dir=" + shared});
  FolderLock held(shared, "checkpoint.dir");
  CHECK_THROWS_WITH(Train(c), Catch::Contains("checkpoint.dir " + shared + " is in use by another ps_train"));
}

TEST_CASE("a run locks its checkpoint.dir also inside its output folder (another run may name it)",
          "[ownership][lock]") {
  const Config c = Tiny("locked_inner");
  FolderLock held(c.run.output_dir + "/checkpoints", "checkpoint.dir");  // as a run with this checkpoint.dir would
  CHECK_THROWS_WITH(Train(c), Catch::Contains("checkpoint.dir " + c.run.output_dir + "/checkpoints is in use"));
}

TEST_CASE("a holder killed with SIGKILL leaves no stale lock", "[ownership][lock]") {
  const std::string dir = TempDir() + "/killed_holder";
  int ready[2];
  REQUIRE(pipe(ready) == 0);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    FolderLock held(dir, "run.output_dir");
    (void)!write(ready[1], "x", 1);
    pause();
    _exit(0);
  }
  char byte = 0;
  REQUIRE(read(ready[0], &byte, 1) == 1);
  CHECK_THROWS_AS(FolderLock(dir, "run.output_dir"), ConfigError);  // held now
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  CHECK_NOTHROW(FolderLock(dir, "run.output_dir"));
}

TEST_CASE("two runs sharing a checkpoint.dir: the second takes nothing and deletes nothing of the first's",
          "[ownership][shared_dir]") {
  const std::string shared = TempDir() + "/shared_ckpts";
  const Config a = Tiny("share_a", {"run.name=a", "checkpoint.dir=" + shared});
  Train(a);
  const auto before = Snapshot(shared);
  REQUIRE(ListCheckpoints(shared).size() == 2);
  const Config b = Tiny("share_b", {"run.name=b", "checkpoint.dir=" + shared, "optimizer.lr=1e-2", "train.max_steps=8",
                                    "checkpoint.keep=1"});
  CHECK_THROWS_AS(Train(b), ConfigError);
  CHECK_THROWS_WITH(Train(b), Catch::Contains(shared + "/step_4 was written by another run ('a' in ") &&
                                  Catch::Contains("this is run 'b' in") &&
                                  Catch::Contains("checkpoint.resume: " + shared + "/step_4"));
  CHECK(Snapshot(shared) == before);
  CHECK_FALSE(fs::exists(b.run.output_dir + "/metrics.jsonl"));
  // Named explicitly, a's checkpoint starts b; b's pruning (keep 1) deletes only b's own.
  Config b_from_a = Tiny("share_b2", {"run.name=b", "checkpoint.dir=" + shared, "train.max_steps=8", "checkpoint.keep=1",
                                      "checkpoint.resume=" + shared + "/step_4"});
  const TrainResult r = Train(b_from_a);
  CHECK(r.start_step == 4);
  CHECK(ListCheckpoints(shared) == std::vector<std::string>{shared + "/step_8", shared + "/step_4", shared + "/step_2"});
  for (const auto& [file, bytes] : before) {
    INFO(file);
    if (file != "latest") CHECK(ReadText(shared + "/" + file) == bytes);  // a's files as they were
  }
  CHECK(ReadCheckpoint(shared + "/step_2").run_name == "a");
  CHECK(ReadCheckpoint(shared + "/step_4").run_name == "a");
  CHECK(ReadCheckpoint(shared + "/step_8").run_name == "b");
}

TEST_CASE("two runs of the default name in different folders are different runs", "[ownership][shared_dir]") {
  const std::string shared = TempDir() + "/shared_default_names";
  Train(Tiny("default_a", {"checkpoint.dir=" + shared}));
  const auto before = Snapshot(shared);
  const Config b = Tiny("default_b", {"checkpoint.dir=" + shared, "optimizer.lr=1e-2", "train.max_steps=8",
                                      "checkpoint.keep=1"});
  CHECK_THROWS_WITH(Train(b), Catch::Contains("was written by another run ('run' in " +
                                                    fs::weakly_canonical(TempDir() + "/default_a").string()));
  CHECK(Snapshot(shared) == before);
}

TEST_CASE("run.overwrite deletes only this run's checkpoints: another run's in its checkpoint.dir stop it",
          "[ownership][shared_dir]") {
  const std::string shared = TempDir() + "/shared_overwrite";
  Train(Tiny("overwrite_a", {"run.name=a", "checkpoint.dir=" + shared}));
  const auto before = Snapshot(shared);
  const Config b = Tiny("overwrite_b", {"run.name=b", "checkpoint.dir=" + shared, "run.overwrite=true"});
  CHECK_THROWS_WITH(Train(b), Catch::Contains("run.overwrite: " + shared + " holds checkpoints this run did not write") &&
                                  Catch::Contains(shared + "/step_4"));
  CHECK(Snapshot(shared) == before);
  // Its own earlier checkpoints (in its own folder) it does delete.
  const Config again = Tiny("overwrite_a", {"run.name=a", "checkpoint.dir=" + shared, "run.overwrite=true",
                                            "train.max_steps=2"});
  Train(again);
  CHECK(ListCheckpoints(shared) == std::vector<std::string>{shared + "/step_2"});
}

TEST_CASE("an edited manifest in the newest checkpoint: resume falls back and no valid checkpoint changes",
          "[ownership][manifest]") {
  for (const char* field : {"step", "consumed_samples"}) {
    INFO(field);
    const Config c = Tiny(std::string("edited_") + field, {"train.max_steps=6"});
    testing::TrainKilledAfter(c, 5);
    const std::string dir = c.run.output_dir + "/checkpoints";
    REQUIRE(ListCheckpoints(dir) == std::vector<std::string>{dir + "/step_4", dir + "/step_2"});
    // The newest manifest edited (no new hash): a negative step, or fewer samples.
    nlohmann::json state = nlohmann::json::parse(ReadText(dir + "/step_4/state.json"));
    state[field] = std::string(field) == "step" ? -1 : 1;
    std::ofstream(dir + "/step_4/state.json", std::ios::trunc) << state.dump(2);
    const auto step2 = Snapshot(dir + "/step_2");
    const TrainResult r = Train(c);
    CHECK(r.start_step == 2);  // fell back to the previous one
    CHECK(r.losses.size() == 4);
    CHECK(Snapshot(dir + "/step_2") == step2);
    CHECK(ReadText(dir + "/step_4.unusable/state.json") == state.dump(2));  // kept as it was, set aside
    CHECK(ReadCheckpoint(dir + "/step_4").step == 4);  // written anew by the resumed run
    CHECK(ReadCheckpoint(dir + "/step_6").step == 6);
  }
}

TEST_CASE("checkpoint.export_hf never replaces a folder or file it did not write", "[ownership][export]") {
  SECTION("a user's folder at <output_dir>/hf: an error before training, the files kept") {
    const Config c = Tiny("export_user_dir", {"checkpoint.export_hf=true"});
    fs::create_directories(c.run.output_dir + "/hf");
    std::ofstream(c.run.output_dir + "/hf/README.md") << "my notes";
    CHECK_THROWS_WITH(Train(c), Catch::Contains("checkpoint.export_hf " + c.run.output_dir + "/hf") &&
                                    Catch::Contains("was not written by a ps_train export"));
    CHECK(ReadText(c.run.output_dir + "/hf/README.md") == "my notes");
    CHECK_FALSE(fs::exists(c.run.output_dir + "/metrics.jsonl"));
  }
  SECTION("a user's file named hf") {
    const Config c = Tiny("export_user_file", {"checkpoint.export_hf=true"});
    fs::create_directories(c.run.output_dir);
    std::ofstream(c.run.output_dir + "/hf") << "not a folder";
    CHECK_THROWS_WITH(Train(c), Catch::Contains("exists and is not a folder"));
    CHECK(ReadText(c.run.output_dir + "/hf") == "not a folder");
  }
  SECTION("its own export from an earlier run is replaced; no temporary folder stays") {
    const Config c = Tiny("export_own", {"checkpoint.export_hf=true"});
    Train(c);
    REQUIRE(fs::exists(c.run.output_dir + "/hf/" + kExportMarkerFile));
    const Config again = Tiny("export_own", {"checkpoint.export_hf=true", "run.overwrite=true", "optimizer.lr=1e-2"});
    const std::string first = ReadText(c.run.output_dir + "/hf/model.safetensors");
    Train(again);
    CHECK(ReadText(c.run.output_dir + "/hf/model.safetensors") != first);
    for (const auto& e : fs::directory_iterator(c.run.output_dir)) {
      INFO(e.path());
      CHECK(e.path().filename().string().find(".hf.") != 0);
    }
  }
}

TEST_CASE("ps_export's path never replaces checkpoints, the run folder or the checkpoint exported",
          "[ownership][export]") {
  const Config c = Tiny("export_src");
  Train(c);
  const std::string ckpts = c.run.output_dir + "/checkpoints";
  const auto before = Snapshot(c.run.output_dir);
  for (const std::string& out : {ckpts, c.run.output_dir, ckpts + "/step_4", ckpts + "/step_2", ckpts + "/step_4/hf"}) {
    INFO(out);
    CHECK_THROWS_AS(ExportCheckpoint(ckpts, out, /*replace=*/true), ConfigError);
    CHECK_THROWS_WITH(ExportCheckpoint(ckpts + "/step_4", out, /*replace=*/true), Catch::Contains("checkpoints"));
  }
  CHECK(Snapshot(c.run.output_dir) == before);
  // A user's folder, even with --overwrite; the export's own folder only with it.
  const std::string user = TempDir() + "/export_user_notes";
  fs::create_directories(user);
  std::ofstream(user + "/notes.txt") << "keep me";
  CHECK_THROWS_WITH(ExportCheckpoint(ckpts, user, /*replace=*/true), Catch::Contains("was not written by a ps_train export"));
  CHECK(ReadText(user + "/notes.txt") == "keep me");
  const std::string out = TempDir() + "/export_out";
  ExportCheckpoint(ckpts, out, /*replace=*/false);
  CHECK_THROWS_WITH(ExportCheckpoint(ckpts, out, /*replace=*/false), Catch::Contains("exists already"));
  CHECK_NOTHROW(ExportCheckpoint(ckpts + "/step_2", out, /*replace=*/true));
  CHECK(fs::exists(out + "/model.safetensors"));
  // A bare relative name (ps_export --checkpoint step_4, run in the checkpoints folder).
  const fs::path cwd = fs::current_path();
  fs::current_path(ckpts);
  CHECK_NOTHROW(ExportCheckpoint("step_4", out, /*replace=*/true));
  CHECK_THROWS_WITH(ExportCheckpoint("step_4", "hf", /*replace=*/true), Catch::Contains("lies in"));
  fs::current_path(cwd);
  // An export of a ps_train from before the marker (only export files in it) is replaced.
  fs::remove(out + "/" + kExportMarkerFile);
  CHECK_NOTHROW(ExportCheckpoint(ckpts, out, /*replace=*/true));
  std::ofstream(out + "/notes.txt") << "mine";
  fs::remove(out + "/" + kExportMarkerFile);
  CHECK_THROWS_WITH(ExportCheckpoint(ckpts, out, /*replace=*/true), Catch::Contains("was not written by a ps_train export"));
}

}  // namespace
}  // namespace ps::trainer
