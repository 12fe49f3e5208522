// Mapping between HF GPT-2 state dicts ("transformer." prefix optional; Conv1D weights
// stored [in, out]) and ps::models::Gpt parameters (Linear weights [out, in]).
#pragma once

#include <map>
#include <string>

#include "models/gpt.h"

namespace ps::models {

// Copies HF GPT-2 weights into `model`. Every model parameter must be present with the
// right shape; the causal-mask buffers (attn.bias, attn.masked_bias) and a tied
// lm_head.weight are ignored; any other unused key is an error naming it.
void LoadHfGpt2(Gpt& model, const std::map<std::string, at::Tensor>& hf_state);

}  // namespace ps::models
