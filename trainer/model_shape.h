// The shape of the model a Config describes, whatever its model.type, for the config
// loader's checks: validity, parameter count and the activation estimate, without
// building the model (trainer/model_factory.h builds it).
#pragma once

#include <cstdint>
#include <string>

#include "trainer/config.h"

namespace ps::trainer {

// Checks the shape and counts its parameters; throws c10::Error naming the model.* key at
// fault, or when the count does not fit int64.
void ValidateModelShape(const Config& config);

// Estimated activation bytes in fp32 of `tokens` tokens, `micro_batches_kept` micro-batches
// alive at once (models::EstimateActivationBytes, models::EstimateLlamaActivationBytes).
int64_t EstimateActivationBytesFp32(const Config& config, int64_t tokens, int64_t micro_batches_kept);

// "GPT", "Llama", "BERT masked LM" or "BERT classifier (N labels)": the run banner's name.
std::string ModelKindName(const Config& config);

}  // namespace ps::trainer
