// How ChunkAdam's device update cuts one chunk into batches that fit a fixed scratch
// (chunkmem/update_scratch.h): each batch is a range of the chunk whose elements of
// updated parameters (pieces: a whole parameter, or a part of a large one) are updated by
// one fused call per decay group, their gradients, m and v widened into the scratch
// first and narrowed back after. Pure function; no tensors.
#pragma once

#include <cstdint>
#include <vector>

namespace ps::optim {

// One parameter of a chunk, in the layout's order (ascending offsets).
struct SliceParam {
  int index = 0;             // the runtime's parameter index
  int64_t offset_numel = 0;  // in the chunk; a multiple of the alignment
  int64_t numel = 0;
  bool updated = false;      // has a gradient this step
};

struct SlicePiece {
  int index = 0;
  int64_t offset_numel = 0;  // in the chunk
  int64_t numel = 0;
};

// Chunk elements [begin_numel, end_numel) and the pieces inside it, ascending.
struct SliceBatch {
  int64_t begin_numel = 0;
  int64_t end_numel = 0;
  std::vector<SlicePiece> pieces;
};

// The batches of a chunk whose parameters are `params`. Contract: every element of an
// updated parameter is in exactly one piece, in order; a batch holds no element of a
// parameter that is not updated (between its pieces lie only alignment gaps); each
// batch begins at a multiple of `align_numel` and its length rounded up to
// `align_numel` is at most `max_numel` (a positive multiple of `align_numel`); a
// parameter is split only where a batch is full.
std::vector<SliceBatch> SliceUpdate(const std::vector<SliceParam>& params, int64_t max_numel, int64_t align_numel);

}  // namespace ps::optim
