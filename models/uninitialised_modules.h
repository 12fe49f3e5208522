// Linear and Embedding modules whose weights are allocated but never written, for the
// model constructors given kUninitialised (param_init.h).
#pragma once

#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>

#include <cstdint>

namespace ps::models {

// LibTorch's Linear and Embedding initialise their weights in the constructor (a full
// pass over them with the default generator). These build them at 1x1 and give them
// storage of the real shape that is never written; options() states the real shape.
torch::nn::Linear UninitialisedLinear(int64_t in_features, int64_t out_features, bool bias = true);
torch::nn::Embedding UninitialisedEmbedding(int64_t num_embeddings, int64_t embedding_dim);

}  // namespace ps::models
