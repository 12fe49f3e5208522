// The shape of the model a Config describes, whatever its model.type, for the config
// loader's checks: validity, parameter count and the activation estimate, without
// building the model (trainer/engine/model_factory.h builds it).
#pragma once

#include <cstdint>
#include <string>

#include "models/bert_config.h"
#include "trainer/config/config.h"

namespace ps::trainer {

// Checks the shape and counts its parameters; throws c10::Error naming the model.* key at
// fault, or when the count does not fit int64.
void ValidateModelShape(const Config& config);

// The BERT of a model.type: bert config: the shared shape keys plus the BERT keys; the
// MLM head for pre-training, the classifier for model.num_labels > 0.
models::BertConfig BertConfigOf(const Config& config);

// Estimated activation bytes of one micro-batch of `tokens` tokens in `element_bytes`
// (the memory plan's; the config loader's overflow check), from the model type's own
// estimate. `micro_batches_kept`: the micro-batches whose activations live at once (the
// vertical accumulation schedule's k; 1 otherwise).
int64_t ActivationBytesOf(const Config& config, int64_t tokens, int64_t element_bytes,
                          int64_t micro_batches_kept = 1);

// The width of the attention's queries: n_head x head width, which is n_embd except for a
// Llama whose model.head_dim is set (Qwen3, Mistral: head_dim x n_head may differ from
// n_embd). The FLOPs formula's attention term (metrics.h) counts it.
int64_t AttentionWidthOf(const Config& config);

// "GPT", "Llama", "BERT masked LM" or "BERT classifier (N labels)": the run banner's name.
std::string ModelKindName(const Config& config);

}  // namespace ps::trainer
