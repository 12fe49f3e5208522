// The model a config describes (model.type gpt, bert or llama), and what planning needs of
// it without building it: parameter shapes and the activation estimate.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "models/bert_config.h"
#include "models/gpt_config.h"
#include "models/llama_config.h"
#include "models/trainable.h"
#include "trainer/config.h"
#include "trainer/llama_keys.h"  // LlamaConfigOf

namespace ps::trainer {

// The BERT of a model.type: bert config: the shared shape keys plus the BERT keys; the
// MLM head for pre-training, the classifier for model.num_labels > 0.
models::BertConfig BertConfigOf(const Config& config);

// The model of `config`, on the host, its parameters allocated but not initialised: the
// engine writes their initial values (MakeEngine, models/param_init.h).
std::unique_ptr<models::TrainableModel> MakeModel(const Config& config);

// The model's parameters without building it, in BlockParameters() order.
std::vector<models::ParameterShape> ParameterShapesOf(const Config& config);

// chunk.cpu_embedding: whether parameter `name` lives on the host in fp32, outside the
// chunks. GPT: wpe, and wte when not tied to the LM head; Llama: embed_tokens when not
// tied to the LM head (it has no position table); BERT: the position and token-type
// embeddings, and the word embedding when no MLM decoder is tied to it.
bool EmbeddingOnHost(const Config& config, const std::string& name);

// Estimated activation bytes of one micro-batch of `tokens` tokens (the memory plan's).
// `micro_batches_kept`: the micro-batches whose activations live at once (the
// vertical accumulation schedule's k; 1 otherwise).
int64_t ActivationBytesOf(const Config& config, int64_t tokens, int64_t element_bytes,
                          int64_t micro_batches_kept = 1);

}  // namespace ps::trainer
