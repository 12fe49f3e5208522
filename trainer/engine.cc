#include "trainer/engine.h"

#include <string>

#include "trainer/chunk_engine.h"
#include "trainer/config_loader.h"
#include "trainer/plain_engine.h"

namespace ps::trainer {

std::unique_ptr<TrainingEngine> MakeEngine(std::unique_ptr<models::TrainableModel> model, const Config& config,
                                           at::Device device, const models::InitPlan& init,
                                           comm::Communicator* comm) {
  if (config.chunk.enabled) {
    if (comm != nullptr && comm->world_size() > 1) {
      throw ConfigError("chunk.enabled with world size " + std::to_string(comm->world_size()) +
                        ": ZeRO over chunk groups is not built yet (run one process, or chunk.enabled: false "
                        "for plain data parallel)");
    }
    return std::make_unique<ChunkEngine>(std::move(model), config, device, init);
  }
  return std::make_unique<PlainEngine>(std::move(model), config, device, init, comm);
}

}  // namespace ps::trainer
