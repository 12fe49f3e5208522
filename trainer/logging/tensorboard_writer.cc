#include "trainer/logging/tensorboard_writer.h"

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <stdexcept>
#include <system_error>

#include "trainer/logging/tensorboard_event.pb.h"
#include "trainer/logging/tensorboard_record.h"

namespace ps::trainer {
namespace {

namespace fs = std::filesystem;

double UnixSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string HostName() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

// A new event file's path in `dir` (created); never one that exists.
std::string NewEventFilePath(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw std::runtime_error("cannot create TensorBoard folder " + dir + ": " + ec.message());
  const std::string base = (fs::path(dir) / ("events.out.tfevents." +
                                             std::to_string(static_cast<int64_t>(UnixSeconds())) + "." + HostName()))
                               .string();
  std::string path = base;
  for (int n = 2; fs::exists(path); ++n) path = base + "." + std::to_string(n);
  return path;
}

void WriteEvent(CheckedFile& out, const tensorboard::Event& event) {
  std::string data;
  if (!event.SerializeToString(&data)) {
    throw std::runtime_error("cannot serialise a TensorBoard event for " + out.path());
  }
  out.WriteRecord(FrameRecord(data));
}

}  // namespace

TensorBoardWriter::TensorBoardWriter(const std::string& dir)
    : out_(NewEventFilePath(dir), CheckedFile::Mode::kTruncate) {
  tensorboard::Event event;
  event.set_wall_time(UnixSeconds());
  event.set_file_version("brain.Event:2");
  WriteEvent(out_, event);
}

void TensorBoardWriter::WriteScalars(int64_t step, const std::vector<std::pair<std::string, double>>& scalars) {
  tensorboard::Event event;
  event.set_wall_time(UnixSeconds());
  event.set_step(step);
  tensorboard::Summary* summary = event.mutable_summary();
  for (const auto& [tag, value] : scalars) {
    tensorboard::Summary::Value* v = summary->add_value();
    v->set_tag(tag);
    v->set_simple_value(static_cast<float>(value));
  }
  WriteEvent(out_, event);
}

}  // namespace ps::trainer
