// TensorBoardWriter: one TensorBoard event file of scalar curves (loss, learning rate,
// throughput, ...), written by the training loop when logging.tensorboard is on. It owns
// its file. Every record goes out with one checked write() (no user-space buffer), so a
// killed run loses at most the record being written, and a failed write (disk full)
// takes back what of the record went out and throws std::runtime_error naming the
// file. Records are framed as in tensorboard_record.h; events are the messages of
// tensorboard_event.proto. No LibTorch.
// Not thread-safe: the training thread only.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "trainer/io/file_io.h"

namespace ps::trainer {

class TensorBoardWriter {
 public:
  // Creates folder `dir` if needed and a new event file in it, named as TensorFlow names
  // them: events.out.tfevents.<unix seconds>.<hostname> (plus .2, .3, ... when a file of
  // that name exists), whose first record is the file_version event "brain.Event:2".
  // Throws std::runtime_error naming the folder or file when it cannot be written.
  explicit TensorBoardWriter(const std::string& dir);

  // One event at `step` holding every (tag, value) pair; values are stored as float, as
  // TensorBoard's scalars are.
  void WriteScalars(int64_t step, const std::vector<std::pair<std::string, double>>& scalars);

  const std::string& path() const { return out_.path(); }

 private:
  CheckedFile out_;
};

}  // namespace ps::trainer
