#include "models/hf_folder.h"

#include <c10/util/Exception.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

namespace ps::models {

namespace fs = std::filesystem;

nlohmann::json ReadHfJson(const std::string& path) {
  std::ifstream in(path);
  TORCH_CHECK(in.good(), path, ": cannot open (an HF model folder needs it)");
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    TORCH_CHECK(false, path, ": not valid JSON: ", e.what());
  }
}

void WriteHfJsonFile(const std::string& path, const nlohmann::json& j) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    TORCH_CHECK(out.good(), tmp, ": cannot open for writing");
    out << j.dump(2) << "\n";
    out.flush();
    TORCH_CHECK(out.good(), tmp, ": write failed");
  }
  TORCH_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, path, ": rename from ", tmp, " failed");
}

std::vector<std::string> HfWeightFiles(const std::string& folder) {
  const fs::path dir(folder);
  TORCH_CHECK(fs::is_directory(dir), folder, ": not a folder (model.init_from / --hf name an HF model folder)");
  const fs::path index = dir / "model.safetensors.index.json";
  if (fs::exists(index)) {
    const nlohmann::json j = ReadHfJson(index.string());
    TORCH_CHECK(j.contains("weight_map") && j["weight_map"].is_object(), index.string(),
                ": missing the 'weight_map' object");
    std::set<std::string> files;
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      TORCH_CHECK(it.value().is_string(), index.string(), ": weight_map['", it.key(), "'] is not a file name");
      const std::string file = it.value().get<std::string>();
      TORCH_CHECK(file.find('/') == std::string::npos, index.string(), ": weight_map['", it.key(), "'] names '", file,
                  "', not a file of the folder");
      files.insert(file);
    }
    std::vector<std::string> out;
    for (const auto& f : files) out.push_back((dir / f).string());
    return out;
  }
  const fs::path single = dir / "model.safetensors";
  TORCH_CHECK(fs::exists(single), folder, ": has neither model.safetensors nor model.safetensors.index.json",
              fs::exists(dir / "pytorch_model.bin") ? " (pytorch_model.bin is a pickle; convert it to safetensors)" : "");
  return {single.string()};
}

}  // namespace ps::models
