#include "trainer/io/hf_io.h"

#include <c10/util/Exception.h>
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <stdio.h>
#include <stdlib.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <regex>
#include <stdexcept>

#include "models/hf_bert.h"
#include "models/hf_gpt2.h"
#include "models/hf_llama.h"
#include "models/hf_llama_export.h"
#include "models/lora_config.h"
#include "trainer/config/config_loader.h"
#include "trainer/config/llama_keys.h"
#include "trainer/engine/model_factory.h"
#include "trainer/io/checkpoint.h"
#include "trainer/io/file_io.h"
#include "trainer/io/run_folder.h"
#include "trainer/io/version.h"

namespace ps::trainer {
namespace {

namespace fs = std::filesystem;

constexpr const char* kTokenizerFileNames[] = {
    "tokenizer.json",        "vocab.json",          "merges.txt",         "vocab.txt",
    "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json", "tokenizer.model",
    "chat_template.jinja",
};

// Sampling defaults of the source model (eos ids, temperature): copied beside the weights.
constexpr char kGenerationConfigFile[] = "generation_config.json";

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

InitialWeights ReadInitialWeights(const Config& config) try {
  const auto start = std::chrono::steady_clock::now();
  InitialWeights w;
  if (config.model_type == models::ModelType::kBert) {
    models::HfBertWeights bert = models::MapHfBertWeights(config.model.init_from, BertConfigOf(config));
    w.params = std::move(bert.params);
    w.missing = std::move(bert.missing);
  } else if (config.model_type == models::ModelType::kLlama) {
    // Memory-mapped views in the stored dtype: engine.Load converts them to fp32 one
    // tensor at a time (StateTensor) while writing the masters, so a bf16 folder never
    // exists in fp32 as a whole.
    w.params = models::MapHfLlamaWeights(config.model.init_from, LlamaConfigOf(config));
  } else {
    w.params = models::MapHfGpt2Weights(config.model.init_from, config.model);
  }
  w.read_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  spdlog::info("model.init_from: {} tensors of {} mapped in {:.2f} s", w.params.size(), config.model.init_from, w.read_s);
  return w;
} catch (const c10::Error& e) {  // a missing shard, a tensor of the wrong shape or dtype: the user's input
  throw ConfigError("model.init_from: " + std::string(e.what_without_backtrace()));
}

void LoadInitialWeights(TrainingEngine& engine, const Config& config, InitialWeights weights) {
  const auto start = std::chrono::steady_clock::now();
  EngineState state;
  state.params = std::move(weights.params);
  // Collective under ZeRO (every rank takes the same branch: it depends on the config).
  const models::TensorMap fresh = !weights.missing.empty() ? engine.GatherParams()
                                  : config.lora.enabled    ? engine.GatherTrainableParams()
                                                           : models::TensorMap();
  if (config.lora.enabled) {  // the adapters start from their own init (or lora.init_from, later)
    for (const auto& [name, tensor] : fresh) {
      if (models::IsLoraParameter(name)) state.params[name] = tensor.clone();
    }
  }
  if (!weights.missing.empty()) {
    // A head the folder lacks (a classifier started from a masked-LM folder) keeps
    // this run's random init (the engine initialised only these).
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

namespace {

// `path` without trailing slashes ("/" stays): a folder named "out/" is the folder "out".
std::string WithoutTrailingSlashes(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

// A new empty folder beside `out` (hidden, unique), for an export in progress or the
// folder it replaces.
fs::path FreshSibling(const fs::path& out, const char* purpose) {
  const fs::path parent = out.has_parent_path() ? out.parent_path() : fs::path(".");
  std::string pattern = (parent / ("." + out.filename().string() + "." + purpose + ".XXXXXX")).string();
  if (::mkdtemp(pattern.data()) == nullptr) {
    throw std::runtime_error(pattern + ": cannot create a folder for the export: " + std::strerror(errno));
  }
  return pattern;
}

// Puts the complete folder `fresh` at `out`. Where the file system can, one atomic
// exchange; else `out` moves aside first (a crash between leaves the old export under
// a hidden name beside it). The old folder is deleted after.
void SwapIn(const fs::path& fresh, const fs::path& out) {
  if (!fs::exists(out)) {
    fs::rename(fresh, out);
    return;
  }
  if (::renameat2(AT_FDCWD, fresh.c_str(), AT_FDCWD, out.c_str(), RENAME_EXCHANGE) == 0) {
    fs::remove_all(fresh);  // now the old export
    return;
  }
  const fs::path aside = FreshSibling(out, "replaced");
  fs::rename(out, aside);  // onto an empty folder: allowed
  fs::rename(fresh, out);
  fs::remove_all(aside);
}

// Whether `folder` holds only files an export writes (config.json, weights, the
// tokenizer's files): an export of a ps_train from before the marker existed.
bool OnlyExportFiles(const fs::path& folder) {
  static const std::regex kShard("model-[0-9]{5}-of-[0-9]{5}\\.safetensors");
  std::error_code ec;
  bool any = false;
  for (const auto& entry : fs::directory_iterator(folder, ec)) {
    const std::string name = entry.path().filename().string();
    const bool known = name == "config.json" || name == "model.safetensors" || name == "model.safetensors.index.json" ||
                       name == kGenerationConfigFile || IsTokenizerFileName(name) || std::regex_match(name, kShard);
    if (!known || !entry.is_regular_file(ec)) return false;
    any = true;
  }
  return any && !ec;
}

bool HoldsCheckpoints(const fs::path& folder) {
  std::error_code ec;
  return fs::exists(folder / "state.json", ec) || !ListCheckpoints(folder.string()).empty();
}

// config.json and the weights of `params` as the model type's HF architecture, in
// checkpoint.export_dtype. Returns the names written.
std::vector<std::string> WriteModelFiles(const std::string& folder, const models::TensorMap& params,
                                         const Config& config, int64_t max_shard_bytes) {
  models::HfExportOptions options;
  options.max_shard_bytes = max_shard_bytes;
  options.dtype = ExportDtype(config);
  const bool has_source = !config.model.init_from.empty() && fs::exists(fs::path(config.model.init_from) / "config.json");
  switch (config.model_type) {
    case models::ModelType::kBert:
      return models::WriteHfBertWeights(folder, params, BertConfigOf(config), options);
    case models::ModelType::kLlama:
      return models::WriteHfLlamaWeights(folder, params, LlamaConfigOf(config),
                                         has_source ? config.model.init_from : "", options);
    case models::ModelType::kGpt:
      if (has_source) options.eos_token_id = models::ReadHfEosTokenId(config.model.init_from);
      return models::WriteHfGpt2Weights(folder, params, config.model, options);
  }
  TORCH_CHECK(false, "HF export: unknown model type");
}

}  // namespace

at::ScalarType ExportDtype(const Config& config) {
  if (config.checkpoint.export_dtype == "bf16") return at::kBFloat16;
  if (config.checkpoint.export_dtype == "fp32") return at::kFloat;
  TORCH_CHECK(config.checkpoint.export_dtype == "auto", "checkpoint.export_dtype: expected auto, bf16 or fp32, got '",
              config.checkpoint.export_dtype, "'");
  return config.model_type == models::ModelType::kLlama ? at::kBFloat16 : at::kFloat;
}

std::string HfExportFolder(const Config& config) { return (fs::path(config.run.output_dir) / "hf").string(); }

void CheckExportDestination(const std::string& out_path, bool replace, const std::vector<std::string>& protected_paths,
                            const std::string& what) {
  if (out_path.empty()) throw ConfigError(what + ": the export folder is empty");
  const std::string out_dir = WithoutTrailingSlashes(out_path);
  for (const auto& p : protected_paths) {
    if (FolderIsWithin(p, out_dir) || FolderIsWithin(out_dir, p)) {
      throw ConfigError(what + " " + out_dir + ": " + (FolderIsWithin(p, out_dir) ? "is or holds " : "lies in ") + p +
                        ", which holds checkpoints; an export never replaces or writes into them (choose another "
                        "folder)");
    }
  }
  const fs::path out(out_dir);
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(out, ec))) return;
  if (!fs::is_directory(out, ec)) {
    throw ConfigError(what + " " + out_dir + ": exists and is not a folder; an export does not replace it (move it "
                      "away or choose another folder)");
  }
  if (HoldsCheckpoints(out)) {
    throw ConfigError(what + " " + out_dir + ": holds checkpoints; an export never replaces them");
  }
  if (!fs::exists(out / kExportMarkerFile, ec) && !OnlyExportFiles(out)) {
    throw ConfigError(what + " " + out_dir + ": exists and was not written by a ps_train export (no " +
                      kExportMarkerFile + " in it); it may hold your files, so it is not replaced (move it away or "
                      "choose another folder)");
  }
  if (!replace) throw ConfigError(what + " " + out_dir + ": exists already (pass --overwrite to replace it)");
}

HfExportReport ExportHfFolder(const models::TensorMap& params, const Config& config, const std::string& out_dir,
                              bool replace, const std::vector<std::string>& protected_paths,
                              int64_t max_shard_bytes) {
  return ExportFolder(
      config, out_dir, replace, protected_paths,
      [&](const std::string& folder) { return WriteModelFiles(folder, params, config, max_shard_bytes); },
      /*generation_config=*/true);
}

HfExportReport ExportFolder(const Config& config, const std::string& out_path, bool replace,
                            const std::vector<std::string>& protected_paths, const ExportFilesFn& write_files,
                            bool generation_config) {
  const auto start = std::chrono::steady_clock::now();
  CheckExportDestination(out_path, replace, protected_paths, "export");
  const std::string out_dir = WithoutTrailingSlashes(out_path);  // "e/a/" is the folder e/a
  const fs::path out(out_dir);
  if (out.has_parent_path()) fs::create_directories(out.parent_path());
  const fs::path tmp = FreshSibling(out, "export");
  HfExportReport report;
  report.folder = out_dir;
  try {
    report.files = write_files(tmp.string());
    for (const std::string& file : TokenizerFiles(TokenizerSource(config))) {
      const std::string name = fs::path(file).filename().string();
      fs::copy_file(file, tmp / name, fs::copy_options::overwrite_existing);
      report.files.push_back(name);
    }
    const fs::path generation = fs::path(config.model.init_from) / kGenerationConfigFile;
    if (generation_config && !config.model.init_from.empty() && fs::is_regular_file(generation)) {
      fs::copy_file(generation, tmp / kGenerationConfigFile, fs::copy_options::overwrite_existing);
      report.files.push_back(kGenerationConfigFile);
    }
    WriteFileAtomically((tmp / kExportMarkerFile).string(),
                        std::string("written by ps_train ") + kVersion + " (an HF folder this project may replace)\n");
    for (const auto& name : report.files) SyncFile((tmp / name).string());
    SyncDirectory(tmp.string());
    // The destination again, right before the swap: it may have changed while writing.
    CheckExportDestination(out_dir, replace, protected_paths, "export");
    SwapIn(tmp, out);
  } catch (...) {
    std::error_code ignored;
    fs::remove_all(tmp, ignored);
    throw;
  }
  SyncDirectory(out.has_parent_path() ? out.parent_path().string() : ".");
  for (const auto& name : report.files) report.bytes += static_cast<int64_t>(fs::file_size(out / name));
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

Config ConfigOfCheckpoint(const std::string& config_yaml, const std::string& checkpoint_path) {
  std::string init_from;
  std::vector<std::string> overrides = {"model.init_from=\"\""};
  try {
    const YAML::Node root = YAML::Load(config_yaml);
    if (root["model"] && root["model"]["init_from"]) init_from = root["model"]["init_from"].as<std::string>();
    // Builds before data.format had to be asked for wrote synthetic runs with their
    // (unread) paths; the paths mean nothing to an export or a sample.
    if (root["data"] && root["data"]["format"] && root["data"]["format"].as<std::string>() == "synthetic") {
      overrides.push_back("data.train_path=\"\"");
      overrides.push_back("data.valid_path=\"\"");
    }
    // Builds before the NVMe tier's keys needed chunk.nvme_dir accepted them without it
    // (ignored); they mean nothing without a tier either.
    const YAML::Node chunk = root["chunk"];
    if (chunk && (!chunk["nvme_dir"] || chunk["nvme_dir"].as<std::string>().empty())) {
      const chunkmem::ChunkConfig defaults;
      overrides.push_back("chunk.nvme_host_budget_bytes=" + std::to_string(defaults.nvme_host_budget_bytes));
      overrides.push_back("chunk.nvme_ring_slots=" + std::to_string(defaults.nvme_ring_slots));
    }
  } catch (const YAML::Exception& e) {
    TORCH_CHECK(false, checkpoint_path, ": the saved config is not valid YAML: ", e.what());
  }
  Config c = LoadConfigText(config_yaml, checkpoint_path + "/state.json config", overrides,
                            [](const std::string&) { return std::optional<std::string>(); });
  c.model.init_from = init_from;
  return c;
}

HfExportReport ExportCheckpoint(const std::string& checkpoint, const std::string& out_dir, bool replace,
                                int64_t max_shard_bytes, const std::string& export_dtype) {
  const std::string folder = ResolveCheckpointFolder(checkpoint);
  CheckpointContents contents = ReadCheckpoint(folder, CheckpointParts::kParamsOnly);
  Config config = ConfigOfCheckpoint(contents.config_yaml, folder);
  if (!export_dtype.empty()) config.checkpoint.export_dtype = export_dtype;
  spdlog::info("exporting {} (step {}) to {}", folder, contents.step, out_dir);
  const std::vector<std::string> protected_paths = {folder, fs::path(folder).parent_path().string()};
  return ExportHfFolder(contents.engine.params, config, out_dir, replace, protected_paths, max_shard_bytes);
}

HfExportReport ExportAtEnd(TrainingEngine& engine, const Config& config, const std::string& final_checkpoint) {
  const std::string out = HfExportFolder(config);
  const std::vector<std::string> protected_paths = {CheckpointDir(config)};
  HfExportReport report;
  if (!final_checkpoint.empty() && fs::exists(fs::path(final_checkpoint) / "state.json")) {
    const CheckpointContents contents = ReadCheckpoint(final_checkpoint, CheckpointParts::kParamsOnly);
    report = ExportHfFolder(contents.engine.params, config, out, /*replace=*/true, protected_paths);
  } else {
    report = ExportHfFolder(engine.GatherParams(), config, out, /*replace=*/true, protected_paths);
  }
  spdlog::info("checkpoint.export_hf: wrote {} ({} files, {:.1f} MB) in {:.2f} s", report.folder, report.files.size(),
               report.bytes / 1e6, report.seconds);
  return report;
}

}  // namespace ps::trainer
