// CheckpointPolicy: the checkpointing component of a run. After every step it agrees the
// stop signal over the ranks, decides whether to save (a stop signal; the last step with
// checkpoint.at_end; checkpoint.every_steps / every_minutes, agreed over the ranks when
// every rank saves its share), has the Checkpointer save, and writes each finished
// save's record to the log. The Checkpointer (checkpointer.h) is how a save is written;
// this is when. Training thread only; with several ranks MaybeSave and Finish are
// collectives every rank calls at the same steps.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <functional>

#include "comm/communicator.h"
#include "trainer/config/config.h"
#include "trainer/io/checkpointer.h"
#include "trainer/logging/step_logger.h"

namespace ps::trainer {

// The state a save at `step` takes, made only when a save happens.
using ContentsFn = std::function<CheckpointContents(int64_t step)>;

// Which ranks agree and which save. Not owned.
struct SaveRanks {
  comm::Communicator* comm = nullptr;  // the run's ranks; null: one process
  bool collective_save = false;        // every rank saves its share (TrainingEngine::collective_save)
  at::Device device = at::kCPU;        // where the agreement flags live
};

class CheckpointPolicy {
 public:
  // Not owned: checkpointer, logger.
  CheckpointPolicy(const CheckpointConfig& config, int64_t max_steps, SaveRanks ranks, Checkpointer& checkpointer,
                   StepLogger& logger);

  // After step `step`, with `signal` the stop signal this process got (0: none): returns
  // the signal agreed over the ranks (the largest any rank got; 0: go on). Saves when
  // due; on a signal waits for the save to be complete and records the stop.
  int MaybeSave(int64_t step, int signal, const ContentsFn& contents);
  // At the end of the run: waits for the save in flight and records it.
  void Finish();

 private:
  int AgreeMax(int value) const;  // over the ranks
  void RecordFinished();

  CheckpointConfig config_;
  int64_t max_steps_;
  SaveRanks ranks_;
  Checkpointer& checkpointer_;
  StepLogger& logger_;
};

}  // namespace ps::trainer
