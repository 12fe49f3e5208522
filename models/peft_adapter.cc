#include "models/peft_adapter.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <set>

#include "models/hf_folder.h"
#include "models/module_path.h"

namespace ps::models {
namespace {

constexpr char kKeyPrefix[] = "base_model.model.";

// The module name an adapter key adapts: "...self_attn.q_proj.lora_A.weight" -> "q_proj".
std::string TargetOf(const std::string& name) { return ModuleName(name.substr(0, name.rfind(".lora_"))); }

// Whether `name` is a tensor of a module listed in `modules` (PEFT matches the module
// name's last part, or the whole path).
bool InModules(const std::string& name, const std::vector<std::string>& modules) {
  const std::string module = ModuleOfParameter(name);
  const std::string leaf = ModuleName(module);
  return std::find(modules.begin(), modules.end(), leaf) != modules.end() ||
         std::find(modules.begin(), modules.end(), module) != modules.end();
}

}  // namespace

std::string HfModulePaths::ToHf(const std::string& name) const {
  for (const std::string& top : top_level) {
    if (name.rfind(top, 0) == 0) return name;
  }
  return prefix + name;
}

std::optional<std::string> HfModulePaths::FromHf(const std::string& path) const {
  for (const std::string& top : top_level) {
    if (path.rfind(top, 0) == 0) return path;
  }
  if (path.rfind(prefix, 0) != 0) return std::nullopt;
  return path.substr(prefix.size());
}

PeftAdapter ReadPeftAdapter(const std::string& folder, const HfModulePaths& paths) {
  namespace fs = std::filesystem;
  const std::string config_path = (fs::path(folder) / kPeftConfigFile).string();
  const std::string weights_path = (fs::path(folder) / kPeftWeightsFile).string();
  TORCH_CHECK(fs::is_directory(folder), folder, ": not a PEFT adapter folder (",
              fs::exists(folder) ? "a file" : "it does not exist", ")");
  const nlohmann::json j = ReadHfJson(config_path);
  TORCH_CHECK(j.is_object() && j.value("peft_type", std::string()) == "LORA", config_path,
              ": peft_type is not LORA (only LoRA adapters are read)");
  PeftAdapter out;
  out.lora.enabled = true;
  out.lora.r = HfIntKey(j, "r", config_path);
  TORCH_CHECK(j.contains("lora_alpha") && j.at("lora_alpha").is_number(), config_path, ": lora_alpha is missing");
  out.lora.alpha = j.at("lora_alpha").get<double>();
  out.lora.dropout = j.value("lora_dropout", 0.0);
  out.lora.use_rslora = j.value("use_rslora", false);
  out.base_model_name_or_path = j.value("base_model_name_or_path", std::string());
  // Variants that change what the adapter computes: refused rather than ignored.
  TORCH_CHECK(!j.value("use_dora", false), config_path, ": use_dora is true (DoRA is not computed here)");
  for (const char* pattern : {"rank_pattern", "alpha_pattern"}) {
    TORCH_CHECK(!j.contains(pattern) || j.at(pattern).is_null() || j.at(pattern).empty(), config_path, ": ",
                pattern, " is set (one r and alpha for every module are computed here)");
  }
  TORCH_CHECK(j.value("bias", std::string("none")) == "none", config_path, ": bias is '",
              j.value("bias", std::string()), "' (adapters without biases are computed here)");

  out.task.task_type = j.contains("task_type") && j.at("task_type").is_string() ? j.at("task_type").get<std::string>()
                                                                                   : std::string();
  if (j.contains("modules_to_save") && j.at("modules_to_save").is_array()) {
    out.task.modules_to_save = j.at("modules_to_save").get<std::vector<std::string>>();
  }
  std::set<std::string> targets;
  for (auto& [key, tensor] : MapSafetensors(weights_path)) {
    const std::optional<std::string> name =
        key.rfind(kKeyPrefix, 0) == 0 ? paths.FromHf(key.substr(std::strlen(kKeyPrefix))) : std::nullopt;
    const bool factor = name && IsLoraParameter(*name);
    TORCH_CHECK(factor || (name && InModules(*name, out.task.modules_to_save)), weights_path, ": tensor '", key,
                "' is not a LoRA factor of this model (expected '", kKeyPrefix, paths.prefix,
                "<module>.lora_A.weight' or '.lora_B.weight') nor a tensor of its modules_to_save");
    out.weights[*name] = tensor;
    if (!factor) continue;
    TORCH_CHECK(tensor.dim() == 2, weights_path, ": tensor '", key, "' has ", tensor.dim(), " dimensions, not 2");
    const int64_t rank_dim = EndsWith(*name, ".lora_A.weight") ? 0 : 1;
    TORCH_CHECK(tensor.size(rank_dim) == out.lora.r, weights_path, ": tensor '", key, "' has shape ", tensor.sizes(),
                ", not rank r = ", out.lora.r, " of ", config_path);
    targets.insert(TargetOf(*name));
  }
  TORCH_CHECK(!targets.empty(), weights_path, ": holds no LoRA factor");
  out.lora.target_modules.assign(targets.begin(), targets.end());
  return out;
}

void WritePeftAdapter(const std::string& folder, const TensorMap& weights, const LoraConfig& lora,
                      const std::string& base_model_name_or_path, const HfModulePaths& paths, bool fan_in_fan_out,
                      const PeftTask& task) {
  namespace fs = std::filesystem;
  fs::create_directories(folder);
  TensorMap keyed;
  std::set<std::string> targets;
  for (const auto& [name, tensor] : weights) {
    const bool factor = IsLoraParameter(name);
    TORCH_CHECK(factor || InModules(name, task.modules_to_save), "WritePeftAdapter: '", name,
                "' is not a LoRA factor nor a tensor of modules_to_save");
    keyed[kKeyPrefix + paths.ToHf(name)] = tensor;
    if (factor) targets.insert(TargetOf(name));
  }
  SaveSafetensors((fs::path(folder) / kPeftWeightsFile).string(), keyed, at::kFloat);
  nlohmann::json j = {
      {"peft_type", "LORA"},
      {"task_type", task.task_type.empty() ? nlohmann::json(nullptr) : nlohmann::json(task.task_type)},
      {"r", lora.r},
      {"lora_alpha", lora.alpha},
      {"lora_dropout", lora.dropout},
      {"target_modules", std::vector<std::string>(targets.begin(), targets.end())},
      {"use_rslora", lora.use_rslora},
      {"base_model_name_or_path", base_model_name_or_path},
      {"bias", "none"},
      {"fan_in_fan_out", fan_in_fan_out},
      {"inference_mode", true},
      {"init_lora_weights", true},
      {"use_dora", false},
      {"modules_to_save", task.modules_to_save.empty() ? nlohmann::json(nullptr) : nlohmann::json(task.modules_to_save)},
      {"layers_to_transform", nullptr},
      {"rank_pattern", nlohmann::json::object()},
      {"alpha_pattern", nlohmann::json::object()},
  };
  WriteHfJsonFile((fs::path(folder) / kPeftConfigFile).string(), j);
}

void MergeLoraInto(TensorMap& base, const TensorMap& adapters, double scale, at::ScalarType dtype) {
  static const std::string kA = ".lora_A.weight";
  static const std::string kB = ".lora_B.weight";
  for (const auto& [name, b] : adapters) {
    if (name.size() <= kB.size() || name.compare(name.size() - kB.size(), kB.size(), kB) != 0) continue;
    const std::string module = name.substr(0, name.size() - kB.size());
    TORCH_CHECK(adapters.count(module + kA) != 0, "adapter ", module, " has lora_B but no lora_A");
  }
  TensorMap merged;  // written into `base` once every adapter is checked
  for (const auto& [name, a] : adapters) {
    if (name.size() <= kA.size() || name.compare(name.size() - kA.size(), kA.size(), kA) != 0) continue;
    const std::string module = name.substr(0, name.size() - kA.size());
    const auto b = adapters.find(module + ".lora_B.weight");
    const auto w = base.find(module + ".weight");
    TORCH_CHECK(b != adapters.end(), "adapter ", module, " has lora_A but no lora_B");
    TORCH_CHECK(w != base.end(), "adapter ", module, " adapts no weight of the base model");
    TORCH_CHECK(a.dim() == 2 && b->second.dim() == 2 && a.size(0) == b->second.size(1) &&
                    w->second.sizes() == at::IntArrayRef({b->second.size(0), a.size(1)}),
                "adapter ", module, ": lora_B ", b->second.sizes(), " x lora_A ", a.sizes(),
                " does not match the base weight ", w->second.sizes());
    const at::Tensor delta = b->second.to(at::kFloat).mm(a.to(at::kFloat)).mul(scale);
    merged[w->first] = w->second.to(at::kFloat).add(delta).to(dtype);
  }
  for (auto& [name, tensor] : merged) base[name] = std::move(tensor);
}

}  // namespace ps::models
