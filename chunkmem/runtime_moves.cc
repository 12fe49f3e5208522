#include "chunkmem/runtime_moves.h"

namespace ps::chunkmem {

bool RuntimeMoves::on_device(int chunk) const {
  return runtime_.store().tier(runtime_.chunk_id(ChunkKind::kCompute, chunk)) == Tier::kDevice;
}

}  // namespace ps::chunkmem
