// TensorBoard event files: CRC-32C and record framing against known vectors, the writer's
// records decoded back with the generated Event message, and a tiny training run whose
// tb/ folder holds the training and evaluation curves.
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "tests/catch.h"
#include "tests/file_size_limit.h"
#include "tests/temp_dir.h"
#include "trainer/config/config_loader.h"
#include "trainer/io/file_io.h"
#include "trainer/logging/tensorboard_event.pb.h"
#include "trainer/logging/tensorboard_record.h"
#include "trainer/logging/tensorboard_writer.h"
#include "trainer/train_loop.h"

namespace ps::trainer {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

uint64_t LittleEndian(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

// Every record of an event file, framing and both CRCs checked, parsed as an Event.
std::vector<tensorboard::Event> ReadEvents(const std::string& path) {
  const std::vector<char> bytes = ReadWholeFile(path);
  std::vector<tensorboard::Event> events;
  size_t at = 0;
  while (at < bytes.size()) {
    REQUIRE(bytes.size() - at >= 16);
    const char* p = bytes.data() + at;
    const uint64_t length = LittleEndian(p, 8);
    REQUIRE(LittleEndian(p + 8, 4) == MaskedCrc32c(p, 8));
    REQUIRE(bytes.size() - at >= 16 + length);
    REQUIRE(LittleEndian(p + 12 + length, 4) == MaskedCrc32c(p + 12, length));
    tensorboard::Event event;
    REQUIRE(event.ParseFromArray(p + 12, static_cast<int>(length)));
    events.push_back(event);
    at += 16 + length;
  }
  return events;
}

std::vector<std::string> EventFiles(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().string());
  return out;
}

TEST_CASE("CRC-32C and its mask match the published vectors", "[tensorboard]") {
  CHECK(Crc32c("", 0) == 0u);
  CHECK(Crc32c("123456789", 9) == 0xE3069283u);
  // RFC 3720 (iSCSI), appendix B.4.
  std::vector<unsigned char> bytes(32, 0x00);
  CHECK(Crc32c(bytes.data(), bytes.size()) == 0x8A9136AAu);
  bytes.assign(32, 0xFF);
  CHECK(Crc32c(bytes.data(), bytes.size()) == 0x62A8AB43u);
  for (int i = 0; i < 32; ++i) bytes[i] = static_cast<unsigned char>(i);
  CHECK(Crc32c(bytes.data(), bytes.size()) == 0x46DD794Eu);
  // Masked values as TensorBoard's own reader computes them (its Python masked_crc32c).
  CHECK(MaskedCrc32c("", 0) == 0xA282EAD8u);
  CHECK(MaskedCrc32c("123456789", 9) == 0xC78AB0E5u);
  const char length13[8] = {13, 0, 0, 0, 0, 0, 0, 0};
  CHECK(MaskedCrc32c(length13, 8) == 0x34B8373Cu);
}

TEST_CASE("a record is length, its masked CRC, the data, the data's masked CRC", "[tensorboard]") {
  const std::string data = "hello, board!";  // 13 bytes
  const std::string record = FrameRecord(data);
  REQUIRE(record.size() == 13 + 16);
  CHECK(LittleEndian(record.data(), 8) == 13);
  CHECK(LittleEndian(record.data() + 8, 4) == 0x34B8373Cu);
  CHECK(record.substr(12, 13) == data);
  CHECK(LittleEndian(record.data() + 25, 4) == MaskedCrc32c(data.data(), data.size()));
  CHECK(FrameRecord("").size() == 16);
}

TEST_CASE("the writer's events decode back: version first, then the scalars", "[tensorboard]") {
  const std::string dir = TempDir() + "/tb_writer";
  fs::remove_all(dir);
  std::string path;
  {
    TensorBoardWriter writer(dir);
    path = writer.path();
    writer.WriteScalars(7, {{"train/loss", 2.5}, {"precision/skipped_steps", 0.0}});
    writer.WriteScalars(8, {{"train/loss", 2.25}});
    // Flushed per step: the file holds both events before the writer closes.
    CHECK(ReadEvents(path).size() == 3);
  }
  CHECK(fs::path(path).filename().string().rfind("events.out.tfevents.", 0) == 0);
  const auto events = ReadEvents(path);
  REQUIRE(events.size() == 3);
  CHECK(events[0].file_version() == "brain.Event:2");
  CHECK(events[0].wall_time() > 1.5e9);
  CHECK(events[1].step() == 7);
  REQUIRE(events[1].has_summary());
  REQUIRE(events[1].summary().value_size() == 2);
  CHECK(events[1].summary().value(0).tag() == "train/loss");
  CHECK(events[1].summary().value(0).simple_value() == 2.5f);
  // A zero is written (simple_value is in a oneof), so TensorBoard sees the point.
  CHECK(events[1].summary().value(1).value_case() == tensorboard::Summary::Value::kSimpleValue);
  CHECK(events[2].step() == 8);
  CHECK(events[2].summary().value(0).simple_value() == 2.25f);

  // A second writer in the same second gets a file of its own.
  TensorBoardWriter again(dir);
  CHECK(again.path() != path);
  CHECK(EventFiles(dir).size() == 2);
}

TEST_CASE("an event file filling up: the failed record is taken back, whole records stay", "[tensorboard]") {
  const std::string dir = TempDir() + "/tb_filling";
  fs::remove_all(dir);
  int64_t written = 0;  // seen only by the child; the parent counts the records it reads
  const int status = testing::RunWithFileSizeLimit(2000, [&] {
    TensorBoardWriter writer(dir);
    for (int64_t step = 1; step < 10000; ++step) {
      try {
        writer.WriteScalars(step, {{"train/loss", 2.5}, {"train/lr", 1e-3}, {"perf/tokens_per_s", 5400.0}});
        ++written;
      } catch (const std::runtime_error& e) {
        return std::string(e.what()).find(writer.path()) != std::string::npos && step > 1 ? 0 : 2;
      }
    }
    return 3;  // never failed
  });
  REQUIRE(status == 0);
  const auto files = EventFiles(dir);
  REQUIRE(files.size() == 1);
  CHECK(fs::file_size(files[0]) < 2000);
  const auto events = ReadEvents(files[0]);  // every record whole, both CRCs right
  REQUIRE(events.size() > 2);
  CHECK(events.front().file_version() == "brain.Event:2");
  for (size_t i = 1; i < events.size(); ++i) CHECK(events[i].step() == static_cast<int64_t>(i));
}

// Not run by default (hidden tag): the cost of one logged step's record, for
// docs/benchmarks.md. bazel-bin/tests/trainer/tensorboard_test "[.bench]"
TEST_CASE("cost of WriteScalars", "[.bench]") {
  const std::string dir = TempDir() + "/tb_bench";
  fs::remove_all(dir);
  TensorBoardWriter writer(dir);
  std::vector<std::pair<std::string, double>> scalars;  // a chunk run's step: 29 scalars
  for (int i = 0; i < 29; ++i) scalars.emplace_back("engine/field_" + std::to_string(i), 123456.789 * i);
  const int events = 20000;
  const auto t0 = std::chrono::steady_clock::now();
  for (int step = 0; step < events; ++step) writer.WriteScalars(step, scalars);
  const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / events;
  WARN(scalars.size() << " scalars per event: " << us << " us per WriteScalars, "
                      << fs::file_size(writer.path()) / events << " bytes per event");
}

TEST_CASE("a folder that cannot be made is an error naming it", "[tensorboard]") {
  const std::string file = TempDir() + "/tb_not_a_folder";
  std::ofstream(file) << "x";
  CHECK_THROWS_WITH(TensorBoardWriter(file + "/tb"), Catch::Contains(file));
}

TEST_CASE("a run with logging.tensorboard writes its curves to tb/", "[tensorboard][train]") {
  const std::string corpus = TempDir() + "/tb_corpus.txt";
  {
    std::ofstream out(corpus);
    for (int i = 0; i < 200; ++i) out << "the cat sat on the mat. ";
  }
  const std::string out_dir = TempDir() + "/tb_run";
  const Config c = LoadConfigText(
      "model: {n_layer: 1, n_head: 2, n_embd: 16, n_positions: 16, vocab_size: 256}\n"
      "data: {format: text, seq_len: 16}\n"
      "train: {micro_batch_size: 4, global_batch_size: 4, max_steps: 6, eval_every: 3, eval_steps: 1}\n"
      "logging: {level: warn, log_every: 2, tensorboard: true}\n",
      "test.yaml",
      {"data.train_path=" + corpus, "data.valid_path=" + corpus, "run.output_dir=" + out_dir, "run.threads=1",
       "run.overwrite=true", "checkpoint.resume=never", "checkpoint.at_end=false"},
      ProcessEnv());
  const TrainResult r = Train(c);
  const auto files = EventFiles(out_dir + "/tb");
  REQUIRE(files.size() == 1);
  std::map<std::string, std::vector<std::pair<int64_t, float>>> curves;
  for (const auto& e : ReadEvents(files[0])) {
    for (const auto& v : e.summary().value()) curves[v.tag()].emplace_back(e.step(), v.simple_value());
  }
  // Steps 1 (first), 2, 4, 6; evaluations at 3 and 6.
  REQUIRE(curves["train/loss"].size() == 4);
  CHECK(curves["train/loss"].front() == std::make_pair(int64_t{1}, static_cast<float>(r.losses[0])));
  CHECK(curves["train/loss"].back() == std::make_pair(int64_t{6}, static_cast<float>(r.losses[5])));
  for (const char* tag : {"train/lr", "train/grad_norm", "perf/tokens_per_s", "perf/tflops"}) {
    CHECK(curves[tag].size() == 4);
  }
  CHECK(curves.count("step") == 0);
  REQUIRE(curves["eval/loss"].size() == 2);
  REQUIRE(curves["eval/perplexity"].size() == 2);
  CHECK(curves["eval/perplexity"].back().first == 6);
  CHECK(curves["eval/perplexity"].back().second == Approx(std::exp(r.final_eval_loss)).epsilon(1e-6));

  // Starting afresh (run.overwrite) replaces the earlier run's event files.
  Train(c);
  CHECK(EventFiles(out_dir + "/tb").size() == 1);
}

}  // namespace
}  // namespace ps::trainer
