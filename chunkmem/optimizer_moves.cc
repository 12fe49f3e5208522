#include "chunkmem/optimizer_moves.h"

#include <c10/core/ScalarType.h>
#include <c10/util/Exception.h>

namespace ps::chunkmem {

std::shared_ptr<CopyTicket> ResidencyMoves::SendToHost(int chunk) {
  ToHost(chunk);
  return store_.TakePendingCopy(compute_ids_[chunk]);
}

at::Tensor ResidencyMoves::TryBorrowHost(int64_t numel, at::ScalarType dtype) {
  const int64_t bytes = numel * static_cast<int64_t>(c10::elementSize(dtype));
  if (!store_.CanHold(Tier::kHost, bytes)) return at::Tensor();
  return store_.Borrow(Tier::kHost, numel, dtype, /*zero=*/true);
}

std::shared_ptr<CopyTicket> ResidencyMoves::WriteCompute(int chunk, int64_t offset_numel, const at::Tensor& values) {
  TORCH_INTERNAL_ASSERT(residency_.in_use(chunk) == 0 && !residency_.pinned(chunk), "chunkmem: WriteCompute needs chunk ",
                        chunk, " idle");
  const int id = compute_ids_[chunk];
  at::Tensor dst = store_.payload(id).narrow(0, offset_numel, values.numel());
  if (store_.tier(id) == Tier::kDevice) return store_.CopyToDevice(std::move(dst), values);
  dst.copy_(values);
  return nullptr;
}

}  // namespace ps::chunkmem
