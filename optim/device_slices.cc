#include "optim/device_slices.h"

#include <c10/util/Exception.h>

#include <algorithm>

namespace ps::optim {

std::vector<SliceBatch> SliceUpdate(const std::vector<SliceParam>& params, int64_t max_numel, int64_t align_numel) {
  TORCH_CHECK(align_numel > 0 && max_numel > 0 && max_numel % align_numel == 0,
              "SliceUpdate: the slice must be a positive multiple of the alignment");
  std::vector<SliceBatch> batches;
  bool open = false;
  auto close = [&] { open = false; };
  for (const SliceParam& p : params) {
    if (!p.updated) {  // a batch never spans a parameter it must leave as it is
      close();
      continue;
    }
    TORCH_CHECK(p.offset_numel % align_numel == 0, "SliceUpdate: parameter ", p.index, " is not aligned");
    int64_t at = p.offset_numel;
    const int64_t end = p.offset_numel + p.numel;
    while (at < end) {
      if (open && at >= batches.back().begin_numel + max_numel) close();
      if (!open) {
        batches.push_back(SliceBatch{at, at, {}});
        open = true;
      }
      SliceBatch& b = batches.back();
      const int64_t limit = b.begin_numel + max_numel;
      const int64_t take = std::min(end, limit) - at;
      b.pieces.push_back(SlicePiece{p.index, at, take});
      at += take;
      b.end_numel = at;
      if (at == limit) close();  // full: the rest of the parameter opens the next batch
    }
  }
  return batches;
}

}  // namespace ps::optim
