#include "trainer/engine.h"

#include <string>

#include "trainer/chunk_engine.h"
#include "trainer/config_loader.h"
#include "trainer/plain_engine.h"

namespace ps::trainer {

std::unique_ptr<TrainingEngine> MakeEngine(std::unique_ptr<models::TrainableModel> model, const Config& config,
                                           at::Device device, const models::InitPlan& init,
                                           comm::Communicator* comm) {
  // One rank runs without collectives unless distributed.force_collectives asks for them.
  if (comm != nullptr && comm->world_size() == 1 && !config.distributed.force_collectives) comm = nullptr;
  if (config.chunk.enabled) return std::make_unique<ChunkEngine>(std::move(model), config, device, init, comm);
  return std::make_unique<PlainEngine>(std::move(model), config, device, init, comm);
}

}  // namespace ps::trainer
