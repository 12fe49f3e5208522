// MakeEngine: the TrainingEngine a config asks for (engine.h): a ChunkEngine when
// chunk.enabled, else a PlainEngine, with the accumulation schedule of train.* set.
#pragma once

#include <c10/core/Device.h>

#include <memory>

#include "comm/communicator.h"
#include "models/param_init.h"
#include "models/trainable.h"
#include "trainer/config/config.h"
#include "trainer/engine/engine.h"

namespace ps::trainer {

// The engine `config` asks for, taking `model` (built uninitialised, on the host): the
// engine writes every parameter's initial values as `init` says (models/param_init.h),
// in place (plain) or in its chunk slots (chunks), in parallel over parameters.
// `comm`: the ranks of a data-parallel run (null = one process); not owned.
std::unique_ptr<TrainingEngine> MakeEngine(std::unique_ptr<models::TrainableModel> model, const Config& config,
                                           at::Device device, const models::InitPlan& init,
                                           comm::Communicator* comm = nullptr);

}  // namespace ps::trainer
