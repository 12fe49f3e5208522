#include "trainer/engine/engine_factory.h"

#include <utility>

#include "trainer/config/config_loader.h"
#include "trainer/engine/chunk_engine.h"
#include "trainer/engine/plain_engine.h"

namespace ps::trainer {

std::unique_ptr<TrainingEngine> MakeEngine(std::unique_ptr<models::TrainableModel> model, const Config& config,
                                           at::Device device, const models::InitPlan& init,
                                           comm::Communicator* comm) {
  // One rank runs without collectives unless distributed.force_collectives asks for them.
  if (comm != nullptr && comm->world_size() == 1 && !config.distributed.force_collectives) comm = nullptr;
  std::unique_ptr<TrainingEngine> engine;
  if (config.chunk.enabled) {
    engine = std::make_unique<ChunkEngine>(std::move(model), config, device, init, comm);
  } else {
    engine = std::make_unique<PlainEngine>(std::move(model), config, device, init, comm);
  }
  const int world = comm ? comm->world_size() : 1;
  engine->set_accumulation(VerticalAccumulation(config.train, world), config.logging.step_breakdown);
  return engine;
}

}  // namespace ps::trainer
