#include "chunkmem/layout.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdio>

namespace ps::chunkmem {
namespace {

int64_t AlignUp(int64_t n, int64_t align) { return (n + align - 1) / align * align; }

}  // namespace

ChunkLayout ChunkLayout::Plan(const std::vector<ParamSpec>& params, const LayoutOptions& o) {
  TORCH_CHECK(o.chunk_numel > 0, "chunk size must be > 0 elements, got ", o.chunk_numel);
  TORCH_CHECK(o.world_size > 0, "world size must be > 0, got ", o.world_size);
  TORCH_CHECK(o.align_numel > 0, "alignment must be > 0 elements");
  ChunkLayout layout;
  layout.params_ = params;
  layout.placements_.resize(params.size());
  auto& chunks = layout.chunks_;
  const int64_t capacity = AlignUp(o.chunk_numel, o.align_numel);
  layout.regular_capacity_numel_ = capacity;

  auto open_chunk = [&](int64_t cap) {
    chunks.push_back(ChunkSpec{cap, 0, {}, false});
    return static_cast<int>(chunks.size()) - 1;
  };
  // Appends param i to chunk c at the next aligned offset (the caller checked it fits).
  auto place = [&](int c, size_t i) {
    ChunkSpec& chunk = chunks[c];
    const int64_t offset = AlignUp(chunk.used_numel, o.align_numel);
    layout.placements_[i] = {c, offset, params[i].numel};
    chunk.used_numel = offset + params[i].numel;
    chunk.param_indices.push_back(static_cast<int>(i));
  };
  auto fits = [&](int c, int64_t numel) {
    return c >= 0 && AlignUp(chunks[c].used_numel, o.align_numel) + numel <= chunks[c].capacity_numel;
  };

  int current = -1;  // the regular chunk being filled
  size_t i = 0;
  while (i < params.size()) {
    TORCH_CHECK(params[i].numel > 0, "parameter '", params[i].name, "' has ", params[i].numel, " elements");
    // The block [i, end) and the space it needs when packed from an aligned start.
    size_t end = i;
    int64_t block_numel = 0;
    while (end < params.size() && params[end].block_id == params[i].block_id) {
      block_numel = AlignUp(block_numel, o.align_numel) + params[end].numel;
      ++end;
    }
    // A block that does not fit in the space left starts a new chunk, also when it is
    // larger than a chunk: it then spans as few chunks as possible.
    if (!fits(current, block_numel) && (current < 0 || !chunks[current].param_indices.empty())) {
      current = open_chunk(capacity);
    }
    for (; i < end; ++i) {
      const int64_t numel = params[i].numel;
      if (numel > capacity) {
        place(open_chunk(AlignUp(numel, o.align_numel)), i);  // oversize: a chunk of its own
        continue;
      }
      if (!fits(current, numel)) current = open_chunk(capacity);
      place(current, i);
    }
  }
  while (chunks.size() % static_cast<size_t>(o.world_size) != 0) {
    chunks.push_back(ChunkSpec{capacity, 0, {}, true});
  }
  return layout;
}

int64_t ChunkLayout::param_numel() const {
  int64_t n = 0;
  for (const auto& p : params_) n += p.numel;
  return n;
}

int64_t ChunkLayout::capacity_numel() const {
  int64_t n = 0;
  for (const auto& c : chunks_) n += c.capacity_numel;
  return n;
}

double ChunkLayout::utilization_ratio() const {
  const int64_t cap = capacity_numel();
  return cap == 0 ? 0.0 : static_cast<double>(param_numel()) / static_cast<double>(cap);
}

std::string ChunkLayout::Summary() const {
  int padding = 0, oversize = 0;
  for (const auto& c : chunks_) {
    padding += c.padding;
    oversize += c.capacity_numel > regular_capacity_numel_;
  }
  char buf[256];
  std::snprintf(buf, sizeof(buf),
                "%d chunks (%d padding, %d oversize), %.2fM param elements in %.2fM capacity: "
                "%.1f%% used, %.2fM wasted",
                num_chunks(), padding, oversize, param_numel() / 1e6, capacity_numel() / 1e6,
                100.0 * utilization_ratio(), waste_numel() / 1e6);
  return buf;
}

int64_t ChooseChunkNumel(const std::vector<ParamSpec>& params, int64_t world_size, int64_t align_numel) {
  int64_t largest = 0;
  for (const auto& p : params) largest = std::max(largest, p.numel);
  TORCH_CHECK(largest > 0, "chunk.size_elements auto: the model has no parameters");
  const int64_t lo = AlignUp(largest, align_numel);
  const int64_t hi = 2 * lo;
  const int64_t step = std::max(align_numel, AlignUp((hi - lo) / 256, align_numel));
  int64_t best = lo, best_waste = -1;
  for (int64_t size = lo; size <= hi; size += step) {
    const int64_t waste = ChunkLayout::Plan(params, {size, world_size, align_numel}).waste_numel();
    if (best_waste < 0 || waste < best_waste) {
      best = size;
      best_waste = waste;
    }
  }
  return best;
}

}  // namespace ps::chunkmem
