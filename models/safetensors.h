// Reader and writer for the safetensors format (HF): an 8-byte little-endian header
// length, a JSON header {name: {dtype, shape, data_offsets}}, then raw tensor bytes.
// Errors name the file and the offending tensor. Load/Parse return CPU tensors owning
// their memory (the file is not kept open); Map returns views of a memory map.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ps::models {

using TensorMap = std::map<std::string, at::Tensor>;

// Throws c10::Error naming `path` on a missing file, a truncated or malformed header,
// an unknown dtype, or data offsets that do not match the shape.
TensorMap LoadSafetensors(const std::string& path);
// The same, from the whole file's bytes already in memory (a reader that also hashes
// them reads the file once); `path` names it in errors.
TensorMap ParseSafetensors(const std::string& path, const std::vector<char>& file);
// The same checks, but the tensors are views into a copy-on-write memory map of the
// file, which stays mapped while any of them lives: nothing is read until a tensor is
// touched, so loading a large model one tensor at a time needs no copy of the file. A
// tensor whose data does not start at a multiple of its element size (after one of odd
// byte size) is copied instead.
TensorMap MapSafetensors(const std::string& path);

// The JSON header SaveSafetensors writes for `tensors` (without the 8-byte length):
// tensors in map order, data back to back from offset 0, padded with spaces to a
// multiple of 8 bytes. Streaming writers use it and then write each tensor's bytes.
std::string SafetensorsHeader(const TensorMap& tensors);
// The same with the data in `data_order` (every name of `tensors` once; c10::Error
// otherwise): the header still lists them by name, their offsets follow this order.
std::string SafetensorsHeader(const TensorMap& tensors, const std::vector<std::string>& data_order);

// Writes `tensors` (F32/F16/BF16/I64/I32/U8..., any device), floating ones converted to
// `float_dtype` when given, one tensor at a time (a CPU copy of one tensor at most).
// Writes `path.tmp` then renames, so an existing file is never left half-written.
void SaveSafetensors(const std::string& path, const TensorMap& tensors,
                     std::optional<at::ScalarType> float_dtype = std::nullopt);

// An HF model's weights in `folder`: model.safetensors, or, when they exceed
// `max_shard_bytes`, model-0000i-of-0000n.safetensors (tensors in name order, each shard
// at most max_shard_bytes unless one tensor alone is larger) plus
// model.safetensors.index.json. Sizes count the written dtype (`float_dtype` as in
// SaveSafetensors). Returns the file names written.
std::vector<std::string> SaveShardedSafetensors(const std::string& folder, const TensorMap& tensors,
                                                int64_t max_shard_bytes,
                                                std::optional<at::ScalarType> float_dtype = std::nullopt);

}  // namespace ps::models
