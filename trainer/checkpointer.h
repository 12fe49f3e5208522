// Checkpointer: when a run saves (checkpoint.every_steps, every_minutes, at the end, on
// a signal), how (a host snapshot written by a background thread, or written in place),
// which checkpoints stay (checkpoint.keep), and where a run resumes from
// (checkpoint.resume). The format is checkpoint.h's. Training thread only, except the
// writer thread it owns; at most one save is in flight.
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

#include "trainer/checkpoint.h"
#include "trainer/config.h"

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
  // `dir`: the resolved checkpoint folder.
  Checkpointer(const CheckpointConfig& config, std::string dir);
  ~Checkpointer();  // waits for a save in flight (its error is logged, not thrown)
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
  std::vector<SaveRecord> TakeFinished();

 private:
  void Finish(SaveRecord record);  // after a write: prune, record

  CheckpointConfig config_;
  std::string dir_;
  std::chrono::steady_clock::time_point last_save_time_;
  std::thread writer_;
  std::exception_ptr writer_error_;
  std::atomic<bool> writer_done_{false};  // set by the writer thread as its last act
  std::optional<SaveRecord> in_flight_;
  std::vector<SaveRecord> finished_;
};

// The checkpoint a run resumes from: checkpoint.resume = never -> none; the path of a
// step_N folder -> that checkpoint (any error is thrown); auto -> the newest complete
// one in `dir` that verifies, reporting (and skipping) corrupt newer ones, none if
// there is none; the path of a folder of checkpoints -> as auto, in that folder, but
// an error when none verifies. `unusable`: how many checkpoints failed verification.
std::optional<CheckpointContents> FindResumeCheckpoint(const CheckpointConfig& config, const std::string& dir,
                                                       std::string* path, int* unusable);

}  // namespace ps::trainer
