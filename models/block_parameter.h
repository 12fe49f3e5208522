// BlockParameter and ParameterCounts: a model's parameters as the engines and the chunk
// layout see them (which blocks use each), and its size. Plain data, no model code.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace ps::models {

// A parameter with the blocks that use it in forward, in order: the tied embedding is
// used by the first and the last block. `block_id` is the first of them.
struct BlockParameter {
  std::string name;
  at::Tensor tensor;
  int block_id;
  std::vector<int> used_by_blocks;
};

struct ParameterCounts {
  int64_t total_numel = 0;          // every parameter once (tied counted once)
  int64_t embedding_numel = 0;      // token + position embeddings
  int64_t non_embedding_numel = 0;  // total - embedding (Kaplan's N)
};

}  // namespace ps::models
