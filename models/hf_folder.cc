#include "models/hf_folder.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

namespace ps::models {

namespace fs = std::filesystem;

std::string HfDtypeName(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat: return "float32";
    case at::kBFloat16: return "bfloat16";
    case at::kHalf: return "float16";
    default: TORCH_CHECK(false, "HF export: weights are written as fp32, bf16 or fp16, not ", dtype);
  }
}

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

int64_t HfIntKey(const nlohmann::json& j, const std::string& key, const std::string& path) {
  TORCH_CHECK(j.contains(key), path, ": missing key '", key, "'");
  TORCH_CHECK(j[key].is_number_integer(), path, ": key '", key, "' is not an integer: ", j[key].dump());
  return j[key].get<int64_t>();
}

namespace {

// Whether j[key] is absent or null: the optional key's fallback applies.
bool Absent(const nlohmann::json& j, const std::string& key) { return !j.contains(key) || j[key].is_null(); }

}  // namespace

int64_t HfLayersKey(const nlohmann::json& j, const std::string& key, const std::string& path) {
  const int64_t n = HfIntKey(j, key, path);
  TORCH_CHECK(n >= 1 && n <= 10000, path, ": key '", key, "' is ", n, ", outside [1, 10000]");
  return n;
}

double HfNumberKey(const nlohmann::json& j, const std::string& key, const std::string& path, double fallback) {
  if (Absent(j, key)) return fallback;
  TORCH_CHECK(j[key].is_number(), path, ": key '", key, "' is ", j[key].dump(), ", not a number");
  return j[key].get<double>();
}

int64_t HfIntKey(const nlohmann::json& j, const std::string& key, const std::string& path, int64_t fallback) {
  return Absent(j, key) ? fallback : HfIntKey(j, key, path);
}

bool HfBoolKey(const nlohmann::json& j, const std::string& key, const std::string& path, bool fallback) {
  if (Absent(j, key)) return fallback;
  TORCH_CHECK(j[key].is_boolean(), path, ": key '", key, "' is ", j[key].dump(), ", not true or false");
  return j[key].get<bool>();
}

std::string HfStringKey(const nlohmann::json& j, const std::string& key, const std::string& path,
                        const std::string& fallback) {
  if (Absent(j, key)) return fallback;
  TORCH_CHECK(j[key].is_string(), path, ": key '", key, "' is ", j[key].dump(), ", not a string");
  return j[key].get<std::string>();
}

std::vector<int64_t> ReadHfEosTokenIds(const std::string& folder) {
  for (const char* name : {"generation_config.json", "config.json"}) {
    const fs::path path = fs::path(folder) / name;
    if (!fs::exists(path)) continue;
    const nlohmann::json j = ReadHfJson(path.string());
    if (!j.contains("eos_token_id") || j["eos_token_id"].is_null()) continue;
    const nlohmann::json& eos = j["eos_token_id"];
    std::vector<int64_t> ids;
    for (const nlohmann::json& id : eos.is_array() ? eos : nlohmann::json::array({eos})) {
      TORCH_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0, path.string(),
                  ": eos_token_id is neither an id nor a list of ids: ", eos.dump());
      ids.push_back(id.get<int64_t>());
    }
    return ids;
  }
  return {};
}

bool StartsWith(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

HfMappedWeights MapHfWeights(const std::string& folder, const HfWeightMapping& m) {
  HfMappedWeights out;
  std::map<std::string, std::string> file_of;  // ps name -> file
  for (const std::string& file : HfWeightFiles(folder)) {
    for (auto& [hf_name, tensor] : MapSafetensors(file)) {
      const std::string name = m.ps_name(hf_name);
      if (!m.expected.count(name)) {
        if (m.skip(name)) continue;
        TORCH_CHECK(false, file, ": unexpected tensor '", hf_name, "' (not a parameter of ", m.model, ")");
      }
      TORCH_CHECK(!file_of.count(name), file, ": tensor '", hf_name, "' also in ", file_of[name]);
      const at::Tensor value = m.to_ps_layout ? m.to_ps_layout(name, tensor) : tensor;
      TORCH_CHECK(at::isFloatingType(value.scalar_type()), file, ": tensor '", hf_name, "' is ", value.scalar_type(),
                  ", not floating point");
      TORCH_CHECK(value.sizes().vec() == m.expected.at(name), file, ": tensor '", hf_name, "' has shape ",
                  tensor.sizes(), ", the model expects ", c10::IntArrayRef(m.expected.at(name)),
                  m.layout_note ? m.layout_note(name) : std::string());
      file_of[name] = file;
      out.params.emplace(name, value);
    }
  }
  for (const auto& [name, shape] : m.expected) {
    if (out.params.count(name)) continue;
    TORCH_CHECK(m.may_be_missing(name), folder, ": the weights lack '", m.hf_name(name), "'");
    out.missing.push_back(name);
  }
  return out;
}

}  // namespace ps::models
