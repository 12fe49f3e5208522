#include "trainer/engine.h"

#include "trainer/chunk_engine.h"
#include "trainer/plain_engine.h"

namespace ps::trainer {

std::unique_ptr<TrainingEngine> MakeEngine(models::Gpt model, const Config& config, at::Device device) {
  if (config.chunk.enabled) return std::make_unique<ChunkEngine>(std::move(model), config, device);
  return std::make_unique<PlainEngine>(std::move(model), config, device);
}

}  // namespace ps::trainer
