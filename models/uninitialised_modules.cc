#include "models/uninitialised_modules.h"

#include <ATen/ops/empty.h>

namespace ps::models {

torch::nn::Linear UninitialisedLinear(int64_t in_features, int64_t out_features, bool bias) {
  torch::nn::Linear m(torch::nn::LinearOptions(1, 1).bias(bias));
  m->options.in_features(in_features).out_features(out_features);
  m->weight.set_data(at::empty({out_features, in_features}));
  if (bias) m->bias.set_data(at::empty({out_features}));
  return m;
}

torch::nn::Embedding UninitialisedEmbedding(int64_t num_embeddings, int64_t embedding_dim) {
  torch::nn::Embedding m(torch::nn::EmbeddingOptions(1, 1));
  m->options.num_embeddings(num_embeddings).embedding_dim(embedding_dim);
  m->weight.set_data(at::empty({num_embeddings, embedding_dim}));
  return m;
}

}  // namespace ps::models
