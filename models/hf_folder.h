// HF model folders, independent of the architecture: their JSON files and the list of
// safetensors files holding the weights (one model.safetensors, or the shards that
// model.safetensors.index.json names). Errors name the file.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace ps::models {

// Parses `path`; throws c10::Error naming it when it is missing or not valid JSON.
nlohmann::json ReadHfJson(const std::string& path);

// Writes `j` (indented) to `path` through `path`.tmp and a rename.
void WriteHfJsonFile(const std::string& path, const nlohmann::json& j);

// The weight files of the HF folder `folder` (paths), index first if there is one.
// Throws when the folder is missing or has no safetensors weights.
std::vector<std::string> HfWeightFiles(const std::string& folder);

}  // namespace ps::models
