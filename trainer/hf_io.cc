#include "trainer/hf_io.h"

#include <c10/util/Exception.h>
#include <spdlog/spdlog.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <stdexcept>

#include "models/hf_bert.h"
#include "models/hf_gpt2.h"
#include "trainer/checkpoint.h"
#include "trainer/config_loader.h"
#include "trainer/file_io.h"
#include "trainer/model_factory.h"

namespace ps::trainer {
namespace {

namespace fs = std::filesystem;

constexpr const char* kTokenizerFileNames[] = {
    "tokenizer.json",        "vocab.json",          "merges.txt",         "vocab.txt",
    "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
};

bool IsTokenizerFileName(const std::string& name) {
  for (const char* n : kTokenizerFileNames) {
    if (name == n) return true;
  }
  return false;
}


}  // namespace

std::string ResolveCheckpointFolder(const std::string& path) {
  if (fs::exists(fs::path(path) / "state.json")) return path;
  TORCH_CHECK(fs::is_directory(path), path, ": not a checkpoint folder (",
              fs::exists(path) ? "a file" : "it does not exist", ")");
  const auto found = ListCheckpoints(path);
  TORCH_CHECK(!found.empty(), path, ": neither a checkpoint (no state.json) nor a folder of step_N checkpoints");
  return found.front();
}

InitialWeights ReadInitialWeights(const Config& config) {
  const auto start = std::chrono::steady_clock::now();
  InitialWeights w;
  if (config.model_type == models::ModelType::kBert) {
    models::HfBertWeights bert = models::MapHfBertWeights(config.model.init_from, BertConfigOf(config));
    w.params = std::move(bert.params);
    w.missing = std::move(bert.missing);
  } else {
    w.params = models::MapHfGpt2Weights(config.model.init_from, config.model);
  }
  w.read_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return w;
}

void LoadInitialWeights(TrainingEngine& engine, const Config& config, InitialWeights weights) {
  const auto start = std::chrono::steady_clock::now();
  EngineState state;
  state.params = std::move(weights.params);
  if (!weights.missing.empty()) {
    // A head the folder lacks (a classifier started from a masked-LM folder) keeps
    // this run's random init (the engine initialised only these).
    const models::TensorMap fresh = engine.GatherParams();  // collective under ZeRO
    std::string names;
    for (const auto& name : weights.missing) {
      state.params[name] = fresh.at(name).clone();
      names += (names.empty() ? "" : ", ") + name;
    }
    spdlog::info("model.init_from: {} has no {}; they start from random init", config.model.init_from, names);
  }
  state.params_file = config.model.init_from;
  const size_t tensors = state.params.size();
  engine.Load(state);
  spdlog::info("model.init_from: {} tensors from {} in {:.2f} s", tensors, config.model.init_from,
               weights.read_s + std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

std::string TokenizerSource(const Config& config) {
  if (!config.data.tokenizer.empty()) return config.data.tokenizer;
  if (!config.model.init_from.empty() && fs::is_directory(config.model.init_from)) {
    for (const char* n : kTokenizerFileNames) {
      if (fs::exists(fs::path(config.model.init_from) / n)) return config.model.init_from;
    }
  }
  return "";
}

std::vector<std::string> TokenizerFiles(const std::string& source) {
  std::vector<std::string> out;
  if (source.empty()) return out;
  TORCH_CHECK(fs::exists(source), source, ": the tokenizer (data.tokenizer or model.init_from) does not exist");
  const fs::path dir = fs::is_directory(source) ? fs::path(source) : fs::path(source).parent_path();
  if (!fs::is_directory(source)) {
    const std::string name = fs::path(source).filename().string();
    TORCH_CHECK(IsTokenizerFileName(name), source, ": not a tokenizer file (expected one of tokenizer.json, "
                "vocab.json, merges.txt, vocab.txt)");
    out.push_back(source);
  }
  for (const char* n : kTokenizerFileNames) {
    const fs::path p = dir / n;
    if (!fs::is_regular_file(p)) continue;
    // A single tokenizer file takes only the side files that describe it, not another
    // tokenizer that happens to share the folder.
    const bool side_file = std::string(n).find("config") != std::string::npos ||
                           std::string(n).find("special") != std::string::npos ||
                           std::string(n) == "added_tokens.json";
    if (fs::is_directory(source) || side_file || (fs::path(source).filename() == "vocab.json" && std::string(n) == "merges.txt")) {
      if (std::find(out.begin(), out.end(), p.string()) == out.end()) out.push_back(p.string());
    }
  }
  TORCH_CHECK(!out.empty(), source, ": holds no tokenizer files (tokenizer.json, vocab.json + merges.txt, vocab.txt)");
  return out;
}

HfExportReport ExportHfFolder(const models::TensorMap& params, const Config& config, const std::string& out_dir,
                              bool replace, int64_t max_shard_bytes) {
  const auto start = std::chrono::steady_clock::now();
  const fs::path out(out_dir);
  if (fs::exists(out) && !replace) {
    throw std::runtime_error(out_dir + ": exists already (pass --overwrite to replace it)");
  }
  if (out.has_parent_path()) fs::create_directories(out.parent_path());
  const fs::path tmp = out.string() + ".tmp";
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  HfExportReport report;
  report.folder = out_dir;
  try {
    models::HfExportOptions options;
    options.max_shard_bytes = max_shard_bytes;
    if (config.model_type == models::ModelType::kGpt && !config.model.init_from.empty() &&
        fs::exists(fs::path(config.model.init_from) / "config.json")) {
      options.eos_token_id = models::ReadHfEosTokenId(config.model.init_from);
    }
    report.files = config.model_type == models::ModelType::kBert
                       ? models::WriteHfBertWeights(tmp.string(), params, BertConfigOf(config), options)
                       : models::WriteHfGpt2Weights(tmp.string(), params, config.model, options);
    for (const std::string& file : TokenizerFiles(TokenizerSource(config))) {
      const std::string name = fs::path(file).filename().string();
      fs::copy_file(file, tmp / name, fs::copy_options::overwrite_existing);
      report.files.push_back(name);
    }
    for (const auto& name : report.files) SyncFile((tmp / name).string());
    SyncDirectory(tmp.string());
  } catch (...) {
    std::error_code ignored;
    fs::remove_all(tmp, ignored);
    throw;
  }
  // Swap in: the old folder stays complete until the new one is.
  const fs::path old = out.string() + ".old";
  fs::remove_all(old);
  if (fs::exists(out)) fs::rename(out, old);
  fs::rename(tmp, out);
  fs::remove_all(old);
  if (out.has_parent_path()) SyncDirectory(out.parent_path().string());
  for (const auto& name : report.files) report.bytes += static_cast<int64_t>(fs::file_size(out / name));
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

Config ConfigOfCheckpoint(const std::string& config_yaml, const std::string& checkpoint_path) {
  std::string init_from;
  try {
    const YAML::Node root = YAML::Load(config_yaml);
    if (root["model"] && root["model"]["init_from"]) init_from = root["model"]["init_from"].as<std::string>();
  } catch (const YAML::Exception& e) {
    TORCH_CHECK(false, checkpoint_path, ": the saved config is not valid YAML: ", e.what());
  }
  Config c = LoadConfigText(config_yaml, checkpoint_path + "/state.json config", {"model.init_from=\"\""},
                            [](const std::string&) { return std::optional<std::string>(); });
  c.model.init_from = init_from;
  return c;
}

HfExportReport ExportCheckpoint(const std::string& checkpoint, const std::string& out_dir, bool replace,
                                int64_t max_shard_bytes) {
  const std::string folder = ResolveCheckpointFolder(checkpoint);
  CheckpointContents contents = ReadCheckpoint(folder, CheckpointParts::kParamsOnly);
  const Config config = ConfigOfCheckpoint(contents.config_yaml, folder);
  spdlog::info("exporting {} (step {}) to {}", folder, contents.step, out_dir);
  return ExportHfFolder(contents.engine.params, config, out_dir, replace, max_shard_bytes);
}

HfExportReport ExportAtEnd(TrainingEngine& engine, const Config& config, const std::string& final_checkpoint) {
  const std::string out = (fs::path(config.run.output_dir) / "hf").string();
  HfExportReport report;
  if (!final_checkpoint.empty() && fs::exists(fs::path(final_checkpoint) / "state.json")) {
    const CheckpointContents contents = ReadCheckpoint(final_checkpoint, CheckpointParts::kParamsOnly);
    report = ExportHfFolder(contents.engine.params, config, out, /*replace=*/true);
  } else {
    report = ExportHfFolder(engine.GatherParams(), config, out, /*replace=*/true);
  }
  spdlog::info("checkpoint.export_hf: wrote {} ({} files, {:.1f} MB) in {:.2f} s", report.folder, report.files.size(),
               report.bytes / 1e6, report.seconds);
  return report;
}

}  // namespace ps::trainer
