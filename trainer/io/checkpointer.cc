#include "trainer/io/checkpointer.h"

#include <c10/util/Exception.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <algorithm>
#include <new>
#include <stdexcept>
#include <utility>

#include "comm/exchange.h"
#include "trainer/io/file_io.h"

namespace ps::trainer {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

int64_t TensorBytes(const models::TensorMap& map) {
  int64_t bytes = 0;
  for (const auto& [name, t] : map) bytes += t.numel() * static_cast<int64_t>(t.element_size());
  return bytes;
}

// Host copies of every tensor, so training can go on while they are written: deferred
// values (in memory: DeferredValues::reads_tier false) read, the others copied.
void Snapshot(EngineState& e) {
  for (models::TensorMap* map : {&e.params, &e.exp_avg, &e.exp_avg_sq}) {
    for (auto& [name, t] : *map) {
      if (!t.is_meta()) t = t.detach().to(at::kCPU, /*non_blocking=*/false, /*copy=*/true);
    }
  }
  ReadDeferredValues(e);  // the meta ones: read into host tensors of their own
}

// First number in `path` (a /proc or cgroup file), or -1.
int64_t ReadNumber(const std::string& path, const std::string& key = "") {
  std::ifstream in(path);
  std::string word;
  while (in >> word) {
    if (!key.empty() && word != key) continue;
    if (!key.empty() && !(in >> word)) return -1;
    try {
      return std::stoll(word);
    } catch (const std::exception&) {
      return -1;  // "max": no limit
    }
  }
  return -1;
}

// Host memory a snapshot may take: the kernel's MemAvailable (free plus reclaimable page
// cache), capped by this process's cgroup limit (Slurm --mem; v2, else v1) minus its use.
int64_t AvailableHostBytes() {
  int64_t available = ReadNumber("/proc/meminfo", "MemAvailable:");
  available = available < 0 ? 0 : available * 1024;
  int64_t limit = ReadNumber("/sys/fs/cgroup/memory.max"), used = ReadNumber("/sys/fs/cgroup/memory.current");
  if (limit < 0) {
    limit = ReadNumber("/sys/fs/cgroup/memory/memory.limit_in_bytes");
    used = ReadNumber("/sys/fs/cgroup/memory/memory.usage_in_bytes");
  }
  if (limit > 0 && used >= 0 && limit < (int64_t{1} << 60)) available = std::min(available, std::max<int64_t>(0, limit - used));
  return available;
}

// Whether the host has room for a snapshot of `bytes` (with a quarter to spare).
bool HostHasRoomFor(int64_t bytes) { return static_cast<double>(bytes) * 1.25 < static_cast<double>(AvailableHostBytes()); }

// Whether a save may go to the background: asked for, no value to read from the NVMe
// tier (read as it is written, on this thread), and room for the copies.
bool MayWriteInBackground(bool async, const EngineState& e, int64_t bytes) {
  return async && (!e.deferred || !e.deferred->reads_tier()) && HostHasRoomFor(bytes);
}

}  // namespace

Checkpointer::Checkpointer(const CheckpointConfig& config, std::string dir, RunIdentity run,
                           comm::Communicator* comm, at::Device device)
    : config_(config),
      dir_(std::move(dir)),
      run_(std::move(run)),
      last_save_time_(Clock::now()),
      comm_(comm),
      device_(device) {}

Checkpointer::~Checkpointer() {
  if (sharded()) {
    if (!writer_.joinable()) return;
    writer_.join();
    spdlog::warn("checkpoint step {}: not committed (the run stopped while it was being written); the earlier "
                 "checkpoints are untouched",
                 in_flight_->step);
    return;
  }
  try {
    Wait();
  } catch (const std::exception& e) {
    spdlog::error("checkpoint save failed: {}", e.what());
  }
}

bool Checkpointer::Due(int64_t step) const {
  if (config_.every_steps > 0 && step % config_.every_steps == 0) return true;
  return config_.every_minutes > 0 && SecondsSince(last_save_time_) >= 60.0 * config_.every_minutes;
}

void Checkpointer::Finish(SaveRecord record) {
  const std::string written = record.path;
  finished_.push_back(std::move(record));
  try {  // the checkpoint is complete: failing to delete an old one must not stop the run
    for (const auto& gone : PruneCheckpoints(dir_, config_.keep, written, run_)) spdlog::info("checkpoint deleted: {}", gone);
  } catch (const std::exception& e) {
    spdlog::warn("checkpoint.keep: {}", e.what());
  }
}

void Checkpointer::Save(CheckpointContents contents) {
  if (sharded()) {
    SaveSharded(std::move(contents));
    return;
  }
  Wait();
  last_save_time_ = Clock::now();
  const auto& e = contents.engine;
  const int64_t bytes = TensorBytes(e.params) + TensorBytes(e.exp_avg) + TensorBytes(e.exp_avg_sq);
  SaveRecord record;
  record.step = contents.step;
  // Deferred values of the NVMe tier are read on this thread, as they are written.
  record.background = MayWriteInBackground(config_.async, e, bytes);
  if (!record.background) {
    const CheckpointWriteReport r = WriteCheckpoint(dir_, contents);
    record.path = r.path;
    record.bytes = r.bytes;
    record.write_s = r.seconds;
    spdlog::info("checkpoint step {}: {} ({:.1f} MB in {:.2f} s)", record.step, r.path, r.bytes / 1e6, r.seconds);
    Finish(std::move(record));
    return;
  }
  const auto t0 = Clock::now();
  Snapshot(contents.engine);
  record.snapshot_s = SecondsSince(t0);
  in_flight_ = record;
  writer_done_ = false;
  writer_ = std::thread([this, contents = std::move(contents)]() {
    try {
      const CheckpointWriteReport r = WriteCheckpoint(dir_, contents);
      in_flight_->path = r.path;
      in_flight_->bytes = r.bytes;
      in_flight_->write_s = r.seconds;
    } catch (...) {
      writer_error_ = std::current_exception();
    }
    writer_done_ = true;
  });
}

void Checkpointer::SaveSharded(CheckpointContents contents) {
  Wait();
  last_save_time_ = Clock::now();
  const int rank = comm_->rank(), world = comm_->world_size();
  const int64_t step = contents.step;
  std::string error;
  if (rank == 0) {
    try {
      OpenCheckpointFolder(dir_, step);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  const std::string folder = TmpCheckpointFolder(dir_, step);
  if (comm::AllReduceInt(*comm_, error.empty() ? 0 : 1, comm::ReduceOp::kMax, device_) != 0) {
    throw std::runtime_error("checkpoint step " + std::to_string(step) + ": " +
                             (rank == 0 ? error : "rank 0 could not create " + folder));
  }
  const auto& e = contents.engine;
  const int64_t bytes = TensorBytes(e.params) + TensorBytes(e.exp_avg) + TensorBytes(e.exp_avg_sq);
  SaveRecord record;
  record.step = step;
  record.path = dir_ + "/step_" + std::to_string(step);
  // In the background only if every rank can: the commit is a collective they must reach together.
  const bool room = MayWriteInBackground(config_.async, e, bytes);
  record.background = comm::AllReduceInt(*comm_, room ? 0 : 1, comm::ReduceOp::kMax, device_) == 0;
  in_flight_contents_ = std::move(contents);
  in_flight_files_ = nlohmann::json::object();
  in_flight_error_.clear();
  if (!record.background) {
    const auto t0 = Clock::now();
    try {
      in_flight_files_ = WriteCheckpointShard(folder, *in_flight_contents_, rank, world);
    } catch (const std::exception& ex) {
      in_flight_error_ = ex.what();
    }
    record.write_s = SecondsSince(t0);
    CommitShards(std::move(record), in_flight_files_, in_flight_error_);
    return;
  }
  const auto t0 = Clock::now();
  Snapshot(in_flight_contents_->engine);
  record.snapshot_s = SecondsSince(t0);
  in_flight_ = record;
  writer_done_ = false;
  writer_ = std::thread([this, folder, rank, world]() {
    const auto start = Clock::now();
    try {
      in_flight_files_ = WriteCheckpointShard(folder, *in_flight_contents_, rank, world);
    } catch (const std::exception& ex) {
      in_flight_error_ = ex.what();
    } catch (...) {
      in_flight_error_ = "unknown error";
    }
    in_flight_->write_s = SecondsSince(start);
    writer_done_ = true;
  });
}

void Checkpointer::CommitShards(SaveRecord record, const nlohmann::json& files, const std::string& error) {
  const int rank = comm_->rank(), world = comm_->world_size();
  CheckpointContents contents = std::move(*in_flight_contents_);
  in_flight_contents_.reset();
  const nlohmann::json mine = {{"error", error}, {"files", files}};
  const auto outcomes = comm::AllGatherStrings(
      *comm_, mine.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), device_);
  std::string failure;  // the same on every rank: it comes from what every rank gathered
  nlohmann::json every = nlohmann::json::object();
  for (int r = 0; r < world; ++r) {
    const nlohmann::json outcome = nlohmann::json::parse(outcomes[r]);
    const std::string why = outcome.at("error").get<std::string>();
    if (!why.empty()) failure += (failure.empty() ? "" : "; ") + ("rank " + std::to_string(r) + ": " + why);
    every.update(outcome.at("files"));
  }
  std::string commit_error;
  if (rank == 0 && failure.empty()) {
    try {
      const CheckpointWriteReport report = CommitCheckpoint(dir_, contents, every, world);
      record.bytes = report.bytes;
      record.write_s += report.seconds;
    } catch (const std::exception& e) {
      commit_error = e.what();
    }
  } else if (rank == 0) {
    AbandonCheckpoint(dir_, contents.step);
  }
  if (failure.empty() && comm::AllReduceInt(*comm_, commit_error.empty() ? 0 : 1, comm::ReduceOp::kMax, device_) != 0) {
    failure = rank == 0 ? commit_error : "rank 0 could not commit it";
  }
  if (!failure.empty()) {
    throw std::runtime_error("checkpoint step " + std::to_string(record.step) + " (" + std::to_string(world) +
                             " ranks) failed: " + failure + "; the earlier checkpoints are untouched");
  }
  if (rank != 0) {  // its own files only; rank 0 logs the whole checkpoint
    for (auto it = files.begin(); it != files.end(); ++it) record.bytes += it.value().at("bytes").get<int64_t>();
    finished_.push_back(std::move(record));
    return;
  }
  spdlog::info("checkpoint step {}: {} ({:.1f} MB from {} ranks; {:.2f} s snapshot, {:.2f} s writing{})", record.step,
               record.path, record.bytes / 1e6, world, record.snapshot_s, record.write_s,
               record.background ? " in the background" : "");
  Finish(std::move(record));
}

void Checkpointer::Wait() {
  if (!writer_.joinable()) return;
  writer_.join();
  SaveRecord record = *in_flight_;
  in_flight_.reset();
  if (sharded()) {
    CommitShards(std::move(record), in_flight_files_, in_flight_error_);
    return;
  }
  if (writer_error_) {
    auto error = writer_error_;
    writer_error_ = nullptr;
    std::rethrow_exception(error);
  }
  spdlog::info("checkpoint step {}: {} ({:.1f} MB; {:.2f} s snapshot, {:.2f} s writing in the background)", record.step,
               record.path, record.bytes / 1e6, record.snapshot_s, record.write_s);
  Finish(std::move(record));
}

std::vector<SaveRecord> Checkpointer::TakeFinished() {
  if (writer_.joinable()) {
    // Sharded: every rank is writing (they went to the background together); collected
    // once all are done.
    const bool done = sharded() ? comm::AllReduceInt(*comm_, writer_done_ ? 0 : 1, comm::ReduceOp::kMax, device_) == 0
                                : writer_done_.load();
    if (done) Wait();  // finished: collect it
  }
  std::vector<SaveRecord> out;
  out.swap(finished_);
  return out;
}

namespace {

std::string WhatOf(const std::exception& e) {
  const auto* c10 = dynamic_cast<const c10::Error*>(&e);
  return c10 ? c10->what_without_backtrace() : e.what();
}

// A checkpoint found while resuming: its contents, or none when it fails verification
// (its error added to `errors`, its path to `unusable`: the search goes on to an older
// one). An I/O error or a lack of memory says nothing of the checkpoint: thrown, so it
// is neither set aside nor passed over for an older step.
std::optional<CheckpointContents> ReadCandidate(const std::string& candidate, std::string& errors,
                                                std::vector<std::string>& unusable) {
  try {
    return ReadCheckpoint(candidate);
  } catch (const FileIoError& e) {
    throw FileIoError(candidate + " cannot be read (" + e.what() + "): an I/O error, not a failed verification, so " +
                          "it is not set aside; resume when the file system reads it again",
                      e.error_number());
  } catch (const std::bad_alloc&) {
    throw std::runtime_error(candidate + ": host memory ran out while reading it (not a failed verification: it is "
                             "not set aside)");
  } catch (const c10::OutOfMemoryError& e) {
    throw std::runtime_error(candidate + ": memory ran out while reading it (not a failed verification: it is not "
                             "set aside): " + e.what_without_backtrace());
  } catch (const std::exception& e) {  // CheckpointError, a malformed file
    const std::string what = WhatOf(e);
    spdlog::error("checkpoint {} is unusable, trying an older one: {}", candidate, what);
    errors += "\n  " + what;
    unusable.push_back(candidate);
    return std::nullopt;
  }
}

}  // namespace

std::optional<CheckpointContents> FindResumeCheckpoint(const CheckpointConfig& config, const std::string& dir,
                                                       const RunIdentity& run, std::string* path,
                                                       std::vector<std::string>* unusable) {
  unusable->clear();
  if (config.resume == "never") return std::nullopt;
  std::string search = dir;
  const bool explicit_path = config.resume != "auto";
  if (explicit_path) {
    // A step_N folder; or a checkpoint.dir (no state.json, step_N folders inside): its newest.
    const bool folder_of_checkpoints = !std::filesystem::exists(std::filesystem::path(config.resume) / "state.json") &&
                                       !ListCheckpoints(config.resume).empty();
    if (!folder_of_checkpoints) {
      *path = config.resume;
      CheckpointContents c = ReadCheckpoint(config.resume);
      if (!WrittenBy(c, *path, run, false)) {
        spdlog::warn("checkpoint.resume {}: written by run '{}' in {}, continued as run '{}' in {} (named explicitly)",
                     *path, c.run_name, c.run_output_dir.empty() ? "?" : c.run_output_dir, run.name, run.output_dir);
      }
      return c;
    }
    search = config.resume;
  }
  for (const auto& stray : StrayCheckpointFolders(search)) {
    spdlog::warn("{}: not a checkpoint name ps_train writes (step_<N>, N without leading zeros): ignored, never "
                 "read or deleted", stray);
  }
  std::string errors;
  for (const auto& candidate : ListCheckpoints(search)) {
    std::optional<CheckpointContents> read = ReadCandidate(candidate, errors, *unusable);
    if (!read) continue;
    CheckpointContents& c = *read;
    if (!WrittenBy(c, candidate, run, false) && explicit_path) {  // its folder named in checkpoint.resume
      spdlog::warn("checkpoint.resume {}: its newest valid checkpoint {} was written by run '{}' in {}, continued as "
                   "run '{}' in {} (named explicitly)", config.resume, candidate, c.run_name,
                   c.run_output_dir.empty() ? "?" : c.run_output_dir, run.name, run.output_dir);
    } else if (!WrittenBy(c, candidate, run, false)) {
      throw ConfigError(candidate + " was written by another run ('" + c.run_name + "' in " +
                        (c.run_output_dir.empty() ? "?" : c.run_output_dir) + "; this is run '" + run.name + "' in " +
                        run.output_dir + "): runs do not share a checkpoint.dir. Use a checkpoint.dir of this run's own, or "
                        "set checkpoint.resume: " + candidate + " to continue from it on purpose");
    }
    *path = candidate;
    return std::move(c);
  }
  if (explicit_path) {
    throw CheckpointError("checkpoint.resume " + config.resume + ": no checkpoint in it verifies:" + errors);
  }
  return std::nullopt;
}

}  // namespace ps::trainer
