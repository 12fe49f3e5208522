#include "trainer/io/lora_io.h"

#include <c10/util/Exception.h>
#include <spdlog/spdlog.h>

#include <filesystem>

#include "models/lora_config.h"
#include "models/param_init.h"
#include "models/peft_adapter.h"
#include "trainer/config/config_loader.h"
#include "trainer/engine/model_factory.h"
#include "trainer/io/checkpoint.h"
#include "trainer/io/run_folder.h"

namespace ps::trainer {

models::HfModulePaths HfModulePathsOf(const Config& config) {
  switch (config.model_type) {
    case models::ModelType::kGpt:
      return models::HfModulePaths("transformer.");
    case models::ModelType::kBert:
      return models::HfModulePaths("bert.", {"cls.", "classifier."});
    case models::ModelType::kLlama:
      break;
  }
  return models::HfModulePaths("model.");
}

models::PeftTask PeftTaskOf(const Config& config) {
  if (config.model_type != models::ModelType::kBert) return {};
  if (config.bert.num_labels > 0) return {"SEQ_CLS", {"classifier", "score"}};
  return {"", {}};
}

void LoadInitialAdapters(TrainingEngine& engine, const Config& config) {
  const std::string& folder = config.lora.init_from;
  models::PeftAdapter adapter;
  try {
    adapter = models::ReadPeftAdapter(folder, HfModulePathsOf(config));
  } catch (const c10::Error& e) {
    throw ConfigError("lora.init_from: " + std::string(e.what_without_backtrace()));
  }
  const auto& l = config.lora;
  const auto differs = [&](const std::string& key, const std::string& ours, const std::string& theirs) {
    throw ConfigError("lora.init_from: " + folder + " has " + key + " " + theirs + ", this run's lora." +
                      (key == "lora_alpha" ? std::string("alpha") : key) + " is " + ours +
                      " (set them equal: the adapter's scale depends on them)");
  };
  if (adapter.lora.r != l.r) differs("r", std::to_string(l.r), std::to_string(adapter.lora.r));
  if (adapter.lora.alpha != l.alpha) differs("lora_alpha", std::to_string(l.alpha), std::to_string(adapter.lora.alpha));
  if (adapter.lora.use_rslora != l.use_rslora) {
    differs("use_rslora", l.use_rslora ? "true" : "false", adapter.lora.use_rslora ? "true" : "false");
  }
  for (const auto& [name, tensor] : adapter.weights) {
    if (!models::IsLoraParameter(name) && !TrainsWholeWithLora(config, name)) {
      throw ConfigError("lora.init_from: " + folder + " holds '" + name + "' whole (modules_to_save), which this run "
                        "keeps frozen; only a BERT classifier's head trains whole beside the adapters here");
    }
  }
  EngineState state;
  state.params = std::move(adapter.weights);
  state.params_file = folder + "/" + models::kPeftWeightsFile;
  try {
    engine.Load(state);  // every adapter of this run must be there, and nothing else
  } catch (const c10::Error& e) {
    throw ConfigError("lora.init_from: " + std::string(e.what_without_backtrace()));
  }
  spdlog::info("lora.init_from: {} adapter factors from {}", state.params.size(), folder);
}

std::vector<std::string> WriteAdapterFiles(const models::TensorMap& params, const Config& config,
                                           const std::string& folder, const std::string& base_model) {
  models::TensorMap adapters;
  bool factors = false;
  for (const auto& [name, tensor] : params) {
    factors |= models::IsLoraParameter(name);
    if (models::IsLoraParameter(name) || TrainsWholeWithLora(config, name)) adapters[name] = tensor;
  }
  TORCH_CHECK(factors, "no adapter factors to write (a run without lora.enabled?)");
  models::WritePeftAdapter(folder, adapters, config.lora, base_model, HfModulePathsOf(config),
                           /*fan_in_fan_out=*/config.model_type == models::ModelType::kGpt, PeftTaskOf(config));
  return {models::kPeftConfigFile, models::kPeftWeightsFile};
}

namespace {

// The base's weights: model.init_from's, or the run's random init from run.seed.
models::TensorMap BaseParams(const Config& config) {
  if (!config.model.init_from.empty()) return ReadInitialWeights(config).params;
  Config base = config;
  base.lora = models::LoraConfig();
  std::unique_ptr<models::TrainableModel> model = MakeModel(base);
  const uint64_t seed = static_cast<uint64_t>(config.run.seed);
  const auto params = model->BlockParameters();
  models::InitParameters(params, models::InitPlan{seed, {}},
                         [&](const std::string& name, at::Tensor values) { model->InitParameter(name, values, seed); });
  models::TensorMap out;
  for (const auto& p : params) out[p.name] = p.tensor.detach();
  return out;
}

}  // namespace

models::TensorMap MergedParams(const models::TensorMap& adapters, const Config& config,
                               at::ScalarType merged_dtype) {
  models::TensorMap out = BaseParams(config);
  models::MergeLoraInto(out, adapters, models::LoraScale(config.lora), merged_dtype);
  for (const auto& [name, tensor] : adapters) {  // a head trained whole replaces the base's
    if (TrainsWholeWithLora(config, name)) out[name] = tensor.to(merged_dtype);
  }
  return out;
}

HfExportReport ExportLoraCheckpoint(const std::string& checkpoint, const std::string& out_dir,
                                    const LoraExportOptions& options) {
  namespace fs = std::filesystem;
  const std::string folder = ResolveCheckpointFolder(checkpoint);
  const CheckpointContents contents = ReadCheckpoint(folder, CheckpointParts::kParamsOnly);
  Config config = ConfigOfCheckpoint(contents.config_yaml, folder);
  TORCH_CHECK(config.lora.enabled, folder, ": not a LoRA run's checkpoint (lora.enabled is false in its config)");
  if (!options.export_dtype.empty()) config.checkpoint.export_dtype = options.export_dtype;
  const std::vector<std::string> protected_paths = {folder, fs::path(folder).parent_path().string()};
  spdlog::info("exporting {} (step {}) to {} ({})", folder, contents.step, out_dir,
               options.merge ? "merged into the base" : "PEFT adapter");
  if (options.merge) {
    return ExportHfFolder(MergedParams(contents.engine.params, config, ExportDtype(config)), config, out_dir,
                          options.replace, protected_paths, options.max_shard_bytes);
  }
  const std::string base = options.base_model.empty() ? config.model.init_from : options.base_model;
  return ExportFolder(
      config, out_dir, options.replace, protected_paths,
      [&](const std::string& tmp) { return WriteAdapterFiles(contents.engine.params, config, tmp, base); },
      /*generation_config=*/false);
}

HfExportReport ExportLoraAtEnd(const models::TensorMap& params, const Config& config) {
  const std::vector<std::string> protected_paths = {CheckpointDir(config)};
  const HfExportReport report = ExportFolder(
      config, HfExportFolder(config), /*replace=*/true, protected_paths,
      [&](const std::string& tmp) { return WriteAdapterFiles(params, config, tmp, config.model.init_from); },
      /*generation_config=*/false);
  spdlog::info("checkpoint.export_hf: wrote the adapter folder {} ({:.2f} MB)", report.folder, report.bytes / 1e6);
  return report;
}

}  // namespace ps::trainer
