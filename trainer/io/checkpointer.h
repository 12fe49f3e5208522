// Checkpointer: when a run saves (checkpoint.every_steps, every_minutes, at the end, on
// a signal), how (a host snapshot written by a background thread, or written in place),
// which checkpoints stay (checkpoint.keep), and where a run resumes from
// (checkpoint.resume). The format is checkpoint.h's. Training thread only, except the
// writer thread it owns; at most one save is in flight.
// Sharded (a communicator given: a ZeRO run, where every rank holds part of the state):
// every rank calls Save at the same step with its own share and writes its own files;
// rank 0 opens the folder and commits it once every rank's files are complete
// (docs/checkpoints.md, "Sharded saves"). Save, Wait and TakeFinished are then
// collectives, called by every rank in the same order.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "trainer/config/config.h"
#include "trainer/io/checkpoint.h"

namespace ps::trainer {

struct SaveRecord {
  int64_t step = 0;
  std::string path;
  int64_t bytes = 0;
  double snapshot_s = 0;  // training-thread time: copying the state to the host (background saves)
  double write_s = 0;     // writing, fsync and rename
  bool background = false;
};

class Checkpointer {
 public:
  // `dir`: the resolved checkpoint folder. `run`: this run, whose checkpoints alone
  // checkpoint.keep prunes. `comm` (not owned; null: one writer, rank 0 alone calls
  // Save): sharded saves over its ranks, small agreements on `device`.
  Checkpointer(const CheckpointConfig& config, std::string dir, RunIdentity run, comm::Communicator* comm = nullptr,
               at::Device device = at::kCPU);
  // Waits for a save in flight (its error is logged, not thrown). Sharded: only joins
  // the writer (no collective: the other ranks may be gone); the save is not committed.
  ~Checkpointer();
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  // Whether checkpoint.every_steps or every_minutes asks for a save after `step`.
  bool Due(int64_t step) const;
  // Saves `contents` (tensors may be views of live training state). In the background
  // when checkpoint.async is on and the host has room for a copy; otherwise before
  // returning. Waits for the previous save first. Throws on a failed write.
  void Save(CheckpointContents contents);
  // Waits for the save in flight; rethrows its error.
  void Wait();
  // Saves finished since the last call (for metrics.jsonl); rethrows a background error.
  // Sharded: collects a save once every rank's writer is done (one all-reduce per call
  // while a save is in flight).
  std::vector<SaveRecord> TakeFinished();

 private:
  void Finish(SaveRecord record);  // after a write: prune, record
  bool sharded() const { return comm_ != nullptr; }
  void SaveSharded(CheckpointContents contents);
  // Sharded: every rank's outcome gathered; rank 0 commits (or abandons) the folder.
  // Throws on every rank if any rank failed.
  void CommitShards(SaveRecord record, const nlohmann::json& files, const std::string& error);

  CheckpointConfig config_;
  std::string dir_;
  RunIdentity run_;
  std::chrono::steady_clock::time_point last_save_time_;
  std::thread writer_;
  std::exception_ptr writer_error_;
  std::atomic<bool> writer_done_{false};  // set by the writer thread as its last act
  std::optional<SaveRecord> in_flight_;
  std::vector<SaveRecord> finished_;
  comm::Communicator* comm_ = nullptr;
  at::Device device_;
  // Sharded, a save in flight: its scalar contents (rank 0 commits them) and what this
  // rank's writer thread wrote (files) or why it failed (error).
  std::optional<CheckpointContents> in_flight_contents_;
  nlohmann::json in_flight_files_;
  std::string in_flight_error_;
};

// The checkpoint the run `run` resumes from:
// checkpoint.resume = never -> none; the path of a step_N folder -> that checkpoint
// (any error is thrown); auto -> the newest complete one in `dir` that verifies,
// reporting (and skipping) ones that fail, none if there is none; the path of a folder
// of checkpoints -> as auto, in that folder, but an error when none verifies. Under auto
// a checkpoint that verifies but was not written by this run (WrittenBy: another
// run.name, or another run's output folder) is a ConfigError (a folder named in
// checkpoint.resume: a warning): runs sharing a checkpoint.dir do not take each other's
// state unless checkpoint.resume names it (then the log says so). `unusable`: the
// checkpoints that failed verification.
std::optional<CheckpointContents> FindResumeCheckpoint(const CheckpointConfig& config, const std::string& dir,
                                                       const RunIdentity& run, std::string* path,
                                                       std::vector<std::string>* unusable);

}  // namespace ps::trainer
