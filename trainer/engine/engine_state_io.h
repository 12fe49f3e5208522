// Lookups into an EngineState for the engines' Load(): a named tensor with the shape the
// model needs, or an error naming the file and the tensor.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/ArrayRef.h>

#include <string>
#include <utility>
#include <vector>

#include "optim/int8_moments.h"
#include "trainer/engine/engine.h"

namespace ps::trainer {

// `map[name]` as fp32; throws c10::Error naming `file` (or "the saved state"), `what`
// and `name` when it is missing, not floating point, or not shaped `sizes`.
at::Tensor StateTensor(const models::TensorMap& map, const std::string& name, c10::IntArrayRef sizes,
                       const std::string& what, const std::string& file);

// A saved Adam moment `map[name]` as fp32 shaped `sizes`: 8-bit ones (uint8: codes, then
// their block scales; optimizer.state_dtype int8) dequantised with `code`; other errors
// as StateTensor's.
at::Tensor StateMoment(const EngineState& state, const models::TensorMap& map, const std::string& name,
                       c10::IntArrayRef sizes, const std::string& what, optim::QuantCode code);

// Updates applied to `name` (0 when the state has none).
int64_t StateSteps(const EngineState& state, const std::string& name);

// Copies the saved value and Adam moments of parameter `name` into `value`, `m` and `v`
// (moments zeroed when the state has none: never updated; saved 8-bit moments are
// dequantised); returns its update count. Errors as StateTensor's.
int64_t RestoreAdamParam(const EngineState& state, const std::string& name, const at::Tensor& value,
                         const at::Tensor& m, const at::Tensor& v);
// The same into a run keeping 8-bit moments (optimizer.state_dtype int8): saved 8-bit
// moments are copied exactly, saved float ones quantised block by block.
int64_t RestoreInt8AdamParam(const EngineState& state, const std::string& name, const at::Tensor& value,
                             const optim::Int8Moment& m, const optim::Int8Moment& v);

// Throws c10::Error naming the first parameter of `state.params` that is not in `known`
// (a checkpoint of another model).
void CheckNoUnknownParams(const EngineState& state, const std::vector<std::string>& known);

// A fingerprint of parameters' values (LoRA's frozen base, kept out of checkpoints):
// their names, shapes and a sample of each one's values (its first 64 elements and 64
// evenly strided ones) rounded to bf16, hashed (FNV-1a, 64 bits); 16 hex digits. Rounded
// so that a base held in fp32 and the same base held in bf16 agree. Reads every tensor
// (any device; a few elements each).
std::string ValuesFingerprint(const std::vector<std::pair<std::string, at::Tensor>>& params);

// ValuesFingerprint in parts, for a base spread over ranks (ZeRO): each rank samples the
// tensors it holds, the samples are summed over ranks, every rank hashes them all.
constexpr int64_t kFingerprintSampleMax = 128;
// How many values ValuesFingerprint samples of a tensor of `numel` elements (<= 128).
int64_t FingerprintSampleLength(int64_t numel);
// Those values of `tensor`, rounded to bf16, as their bits (int16, host, contiguous).
at::Tensor FingerprintSample(const at::Tensor& tensor);
struct FingerprintEntry {
  std::string name;
  std::vector<int64_t> sizes;
  at::Tensor sample;  // FingerprintSample's
};
// ValuesFingerprint of the tensors the entries describe, in their order.
std::string FingerprintOfSamples(const std::vector<FingerprintEntry>& entries);

// Throws c10::Error naming both fingerprints when `state` was saved over a frozen base
// (its extra "frozen_fingerprint") other than the one an engine holds now (`now`, from
// ValuesFingerprint; empty: nothing frozen). A state without one passes.
void CheckFrozenFingerprint(const EngineState& state, const std::string& now);

}  // namespace ps::trainer
