#include "chunkmem/layout.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdio>

namespace ps::chunkmem {
namespace {

int64_t AlignUp(int64_t n, int64_t align) { return (n + align - 1) / align * align; }

}  // namespace

namespace {

// Packs parameters into chunks by rules 1-3 (docs/chunkmem.md, "Layout"), one open
// chunk per class (trainable, frozen), so no chunk mixes the two.
class Packer {
 public:
  Packer(const std::vector<ParamSpec>& params, int64_t capacity, int64_t align, std::vector<ChunkSpec>& chunks,
         std::vector<ParamPlacement>& placements)
      : params_(params), capacity_(capacity), align_(align), chunks_(chunks), placements_(placements) {}

  // Places `members` (indices of one block's parameters of one class, in order).
  void PackBlock(const std::vector<size_t>& members, bool frozen) {
    if (members.empty()) return;
    int& current = current_[frozen ? 1 : 0];
    int64_t block_numel = 0;  // the space the block needs when packed from an aligned start
    for (const size_t i : members) block_numel = AlignUp(block_numel, align_) + params_[i].numel;
    // A block that does not fit in the space left starts a new chunk, also when it is
    // larger than a chunk: it then spans as few chunks as possible.
    if (!Fits(current, block_numel) && (current < 0 || !chunks_[current].param_indices.empty())) {
      current = Open(capacity_, frozen);
    }
    for (const size_t i : members) {
      const int64_t numel = params_[i].numel;
      if (numel > capacity_) {
        Place(Open(AlignUp(numel, align_), frozen), i);  // oversize: a chunk of its own
        continue;
      }
      if (!Fits(current, numel)) current = Open(capacity_, frozen);
      Place(current, i);
    }
  }

 private:
  int Open(int64_t cap, bool frozen) {
    ChunkSpec c{cap, 0, {}, false};
    c.frozen = frozen;
    chunks_.push_back(c);
    return static_cast<int>(chunks_.size()) - 1;
  }
  // Appends param i to chunk c at the next aligned offset (the caller checked it fits).
  void Place(int c, size_t i) {
    ChunkSpec& chunk = chunks_[c];
    const int64_t offset = AlignUp(chunk.used_numel, align_);
    placements_[i] = {c, offset, params_[i].numel};
    chunk.used_numel = offset + params_[i].numel;
    chunk.param_indices.push_back(static_cast<int>(i));
  }
  bool Fits(int c, int64_t numel) const {
    return c >= 0 && AlignUp(chunks_[c].used_numel, align_) + numel <= chunks_[c].capacity_numel;
  }

  const std::vector<ParamSpec>& params_;
  const int64_t capacity_, align_;
  std::vector<ChunkSpec>& chunks_;
  std::vector<ParamPlacement>& placements_;
  int current_[2] = {-1, -1};  // the regular chunk being filled, per class
};

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
  Packer packer(params, capacity, o.align_numel, chunks, layout.placements_);
  bool any_frozen = false;
  for (size_t i = 0; i < params.size();) {
    std::vector<size_t> members[2];  // the block's trainable and frozen parameters
    for (const int block = params[i].block_id; i < params.size() && params[i].block_id == block; ++i) {
      TORCH_CHECK(params[i].numel > 0, "parameter '", params[i].name, "' has ", params[i].numel, " elements");
      members[params[i].frozen ? 1 : 0].push_back(i);
      any_frozen |= params[i].frozen;
    }
    packer.PackBlock(members[0], false);
    packer.PackBlock(members[1], true);
  }
  // Beside a frozen base the trainable parameters (adapters) are small: their chunks
  // keep only the capacity they use (every kind of them costs 16 bytes per element).
  if (any_frozen && o.world_size == 1) {
    for (auto& c : chunks) {
      if (!c.frozen) c.capacity_numel = AlignUp(c.used_numel, o.align_numel);
    }
  }
  while (chunks.size() % static_cast<size_t>(o.world_size) != 0) {
    chunks.push_back(ChunkSpec{capacity, 0, {}, true});
    chunks.back().frozen = any_frozen;  // beside a frozen base: no gradient, master or Adam state for nothing
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
