// The model a config describes (model.type gpt, bert or llama), built, and its parameter
// shapes without building it (the activation estimate and BertConfigOf: model_shape.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "models/bert_config.h"
#include "models/gpt_config.h"
#include "models/llama_config.h"
#include "models/trainable.h"
#include "trainer/config/config.h"
#include "trainer/config/llama_keys.h"  // LlamaConfigOf
#include "trainer/config/model_shape.h"  // BertConfigOf, ActivationBytesOf

namespace ps::trainer {

// The model of `config`, on the host, its parameters allocated but not initialised: the
// engine writes their initial values (MakeEngine, models/param_init.h). With
// lora.enabled, adapters attached and the rest frozen (TrainableModel::AttachLora); a
// target naming no module is a ConfigError.
std::unique_ptr<models::TrainableModel> MakeModel(const Config& config);

// The model's parameters without building it, in BlockParameters() order.
std::vector<models::ParameterShape> ParameterShapesOf(const Config& config);

// Whether parameter `name` trains whole beside the adapters in a LoRA run: a BERT
// classifier's head, as PEFT's SEQ_CLS task keeps it in modules_to_save.
bool TrainsWholeWithLora(const Config& config, const std::string& name);

// chunk.cpu_embedding: whether parameter `name` lives on the host in fp32, outside the
// chunks. GPT: wpe, and wte when not tied to the LM head; Llama: embed_tokens when not
// tied to the LM head (it has no position table); BERT: the position and token-type
// embeddings, and the word embedding when no MLM decoder is tied to it.
bool EmbeddingOnHost(const Config& config, const std::string& name);

}  // namespace ps::trainer
