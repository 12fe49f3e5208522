// The random generators a run draws from (dropout on the CPU or the CUDA device), as
// uint8 state tensors for checkpoints: "rng.cpu", and "rng.cuda" on a CUDA run.
// The data order needs no generator state: it is a function of run.seed and the
// consumed samples (data/batch_sampler.h).
#pragma once

#include <c10/core/Device.h>

#include "models/safetensors.h"

namespace ps::trainer {

models::TensorMap SaveRngStates(at::Device device);
// Throws c10::Error naming the generator whose state is missing or malformed.
void RestoreRngStates(const models::TensorMap& states, at::Device device);

}  // namespace ps::trainer
