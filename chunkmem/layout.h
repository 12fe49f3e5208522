// ChunkLayout: where every parameter lives in the chunks (pure; no tensors).
//
// One layout serves all four chunk kinds (compute-dtype params/grads, fp32 master,
// Adam m, Adam v): chunk i of every kind holds the same parameters at the same
// element offsets. Rules (docs/chunkmem.md): aligned offsets; a block's parameters kept
// in one chunk when they fit; a parameter larger than the chunk size gets a chunk of its
// own; chunk count padded to a multiple of the world size; frozen and trainable
// parameters in chunks of their own (beside frozen ones, trainable chunks trimmed to
// what they hold). Immutable once planned.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ps::chunkmem {

struct ParamSpec {
  std::string name;
  int64_t numel = 0;
  int block_id = 0;  // parameters of one block are kept together where they fit
  bool frozen = false;  // trains nothing (LoRA's base): planned into frozen chunks
};

struct ParamPlacement {
  int chunk_id = -1;
  int64_t offset_numel = 0;
  int64_t numel = 0;
};

struct ChunkSpec {
  int64_t capacity_numel = 0;
  int64_t used_numel = 0;          // end of the last parameter (incl. alignment gaps)
  std::vector<int> param_indices;  // into the planned parameter list, in offset order
  bool padding = false;            // empty chunk added to reach a multiple of world size
  // Holds frozen parameters only: compute kind alone (docs/chunkmem.md, "Frozen chunks").
  bool frozen = false;
};

struct LayoutOptions {
  int64_t chunk_numel = 32 * 1024 * 1024;
  int64_t world_size = 1;
  int64_t align_numel = 32;  // 64 bytes at 2 bytes/element
};

class ChunkLayout {
 public:
  // Throws c10::Error on a non-positive chunk size, world size or parameter size.
  static ChunkLayout Plan(const std::vector<ParamSpec>& params, const LayoutOptions& options);

  const std::vector<ChunkSpec>& chunks() const { return chunks_; }
  const std::vector<ParamPlacement>& placements() const { return placements_; }  // per param
  const std::vector<ParamSpec>& params() const { return params_; }
  int num_chunks() const { return static_cast<int>(chunks_.size()); }
  int64_t regular_capacity_numel() const { return regular_capacity_numel_; }  // non-oversize chunks

  int64_t param_numel() const;     // sum of parameter sizes
  int64_t capacity_numel() const;  // sum of chunk capacities (padding chunks included)
  int64_t waste_numel() const { return capacity_numel() - param_numel(); }
  double utilization_ratio() const;
  std::string Summary() const;     // one line: chunks, capacity, utilisation, waste

 private:
  std::vector<ParamSpec> params_;
  std::vector<ParamPlacement> placements_;
  std::vector<ChunkSpec> chunks_;
  int64_t regular_capacity_numel_ = 0;
};

// chunk.size_elements: auto. Among sizes from the largest parameter to twice that
// (aligned; 256 candidates at most), the one whose layout wastes the fewest elements;
// ties go to the smaller size.
int64_t ChooseChunkNumel(const std::vector<ParamSpec>& params, int64_t world_size,
                         int64_t align_numel = 32);

}  // namespace ps::chunkmem
