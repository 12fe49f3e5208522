#include "trainer/io/run_folder.h"

#include <spdlog/spdlog.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "trainer/config/config_loader.h"
#include "trainer/io/checkpoint.h"
#include "trainer/io/checkpoint_files.h"

namespace ps::trainer {
namespace {

namespace fs = std::filesystem;

// Flattens a YAML mapping into dotted keys -> values as text.
void Flatten(const YAML::Node& node, const std::string& prefix, std::map<std::string, std::string>& out) {
  if (node.IsMap()) {
    for (const auto& kv : node) {
      Flatten(kv.second, prefix.empty() ? kv.first.as<std::string>() : prefix + "." + kv.first.as<std::string>(), out);
    }
    return;
  }
  YAML::Emitter e;
  e << YAML::Flow << node;
  out[prefix] = e.c_str();
}

}  // namespace

std::string CheckpointDir(const Config& c) {
  return c.checkpoint.dir.empty() ? (fs::path(c.run.output_dir) / "checkpoints").string() : c.checkpoint.dir;
}

nlohmann::json RunFingerprint(const Config& c) {
  const auto& m = c.model;
  nlohmann::json f = {{"model.n_layer", m.n_layer},
                      {"model.n_head", m.n_head},
                      {"model.n_embd", m.n_embd},
                      {"model.n_positions", m.n_positions},
                      {"model.vocab_size", m.vocab_size},
                      {"model.tie_word_embeddings", m.tie_word_embeddings},
                      {"precision.dtype", optim::ToString(c.precision.dtype)},
                      {"data.seq_len", c.data.seq_len}};
  if (c.data.format == data::DataFormat::kSft) {
    // A sample is an example, or with packing a row of several: data.consumed_samples
    // counts those, so a resume under the other layout would continue elsewhere.
    f["data.format"] = "sft";
    f["data.packing"] = c.data.packing;
  }
  if (c.lora.enabled) {
    // The checkpoint holds the adapters of these modules and this rank; their scale
    // (alpha, rsLoRA) changes what they compute. The base is checked by its values
    // (PlainEngine's frozen_fingerprint).
    f["lora.r"] = c.lora.r;
    f["lora.alpha"] = c.lora.alpha;
    f["lora.use_rslora"] = c.lora.use_rslora;
    f["lora.target_modules"] = c.lora.target_modules;
  }
  if (c.model_type != models::ModelType::kLlama) return f;  // GPT's and BERT's as they always were
  // A Llama's function also depends on these: a resume with another rope or window would
  // load every tensor and silently compute something else.
  const auto& k = c.llama;
  f["model.type"] = "llama";
  f["model.num_key_value_heads"] = k.num_key_value_heads;
  f["model.head_dim"] = k.head_dim;
  f["model.intermediate_size"] = c.bert.intermediate_size;
  f["model.rope_theta"] = k.rope_theta;
  f["model.rope_scaling.type"] = models::ToString(k.rope_scaling.type);
  f["model.rope_scaling.factor"] = k.rope_scaling.factor;
  f["model.rope_scaling.low_freq_factor"] = k.rope_scaling.low_freq_factor;
  f["model.rope_scaling.high_freq_factor"] = k.rope_scaling.high_freq_factor;
  f["model.rope_scaling.original_max_position_embeddings"] = k.rope_scaling.original_max_position_embeddings;
  f["model.attention_bias"] = k.attention_bias;
  f["model.qkv_bias"] = k.qkv_bias;
  f["model.qk_norm"] = k.qk_norm;
  f["model.sliding_window"] = k.sliding_window;
  return f;
}

RunIdentity IdentityOf(const Config& c) {
  std::error_code ec;
  const fs::path out = fs::weakly_canonical(fs::absolute(c.run.output_dir, ec), ec);
  return {c.run.name, out.string(), RunFingerprint(c)};
}

void CheckFingerprint(const nlohmann::json& saved, const nlohmann::json& now, const std::string& checkpoint) {
  std::string diffs;
  const auto shown = [](const nlohmann::json& f, const std::string& key) {
    const auto it = f.find(key);
    return it == f.end() ? std::string("(absent)") : it->dump();
  };
  for (auto it = now.begin(); it != now.end(); ++it) {
    const std::string was = shown(saved, it.key());
    if (was != it.value().dump()) diffs += "\n  " + it.key() + ": checkpoint " + was + ", this config " + it.value().dump();
  }
  if (saved.is_object()) {
    for (auto it = saved.begin(); it != saved.end(); ++it) {  // keys only the checkpoint's run had
      if (!now.contains(it.key())) diffs += "\n  " + it.key() + ": checkpoint " + it.value().dump() + ", this config (absent)";
    }
  }
  if (!diffs.empty()) {
    throw ConfigError(checkpoint + ": this checkpoint was saved by a run that differs in what must match to resume:" +
                      diffs + "\n(use another run.output_dir / checkpoint.dir, or checkpoint.resume: never)");
  }
}

std::map<std::string, std::string> FlattenYaml(const std::string& yaml) {
  std::map<std::string, std::string> out;
  try {
    Flatten(YAML::Load(yaml), "", out);
  } catch (const YAML::Exception&) {
    out.clear();  // a hand-edited text: nothing to compare
  }
  return out;
}

void LogConfigChanges(const std::string& saved_yaml, const std::string& now_yaml) {
  const std::map<std::string, std::string> was = FlattenYaml(saved_yaml), now = FlattenYaml(now_yaml);
  for (const auto& [key, value] : now) {
    const auto it = was.find(key);
    if (it != was.end() && it->second != value) spdlog::info("config change on resume: {}: {} -> {}", key, it->second, value);
  }
}

bool FolderIsWithin(const std::string& inner, const std::string& outer) {
  std::error_code ec;
  // "" is the current folder (the parent of a bare relative name).
  const auto full = [&ec](const std::string& p) { return fs::weakly_canonical(fs::absolute(p.empty() ? "." : p, ec), ec); };
  const fs::path in = full(inner);
  const fs::path out = full(outer);
  auto o = out.begin(), i = in.begin();
  for (; o != out.end() && i != in.end(); ++o, ++i) {
    if (o->empty()) break;  // a trailing separator of `outer`
    if (*o != *i) return false;
  }
  return o == out.end() || o->empty();
}

bool CheckpointIsIn(const std::string& path, const std::string& dir) {
  std::error_code ec;
  return fs::weakly_canonical(fs::path(path), ec).parent_path() == fs::weakly_canonical(fs::path(dir), ec);
}

void SetAsideNewerCheckpoints(const std::string& dir, int64_t step, bool resume_auto,
                              const std::vector<std::string>& unusable) {
  if (resume_auto) {
    for (const auto& path : unusable) {
      std::string aside = path + ".unusable";
      for (int n = 2; fs::exists(fs::symlink_status(aside)); ++n) aside = path + ".unusable." + std::to_string(n);
      fs::rename(path, aside);
      spdlog::warn("{}: fails verification (see above); renamed to {} (kept for inspection, never read)", path,
                   fs::path(aside).filename().string());
    }
    return;
  }
  for (const auto& path : ListCheckpoints(dir)) {
    const std::string name = fs::path(path).filename().string();
    if (std::stoll(name.substr(5)) <= step) continue;
    throw ConfigError(dir + " holds " + name + ", newer than the resumed step " + std::to_string(step) +
                      ": this run would save over it and prune it; move it away or set another checkpoint.dir");
  }
}

bool ClaimOutputDir(const Config& c, bool resuming, int unusable) {
  const fs::path out = c.run.output_dir;
  const fs::path metrics = out / "metrics.jsonl";
  const std::string ckpt_dir = CheckpointDir(c);
  std::error_code ec;
  const bool has_metrics = fs::exists(metrics, ec) && fs::file_size(metrics, ec) > 0;
  const auto checkpoints = ListCheckpoints(ckpt_dir);
  if (resuming) return true;
  if (!has_metrics && checkpoints.empty()) return false;
  if (!c.run.overwrite && checkpoints.empty()) {
    std::ifstream in(out / "config.resolved.yaml");
    const std::string saved((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (saved == ConfigToYaml(c)) {
      spdlog::warn("{}: an earlier attempt of this run stopped before its first checkpoint; starting again from step 0 "
                   "(metrics.jsonl continues)", out.string());
      return true;
    }
  }
  if (!c.run.overwrite && unusable > 0 && unusable == static_cast<int>(checkpoints.size())) {
    throw ConfigError(ckpt_dir + " holds " + std::to_string(unusable) + " checkpoint(s), none of which verifies (see "
                      "the errors above): repair or move them away (run.overwrite: true would delete them)");
  }
  if (!c.run.overwrite) {
    std::string what = has_metrics ? metrics.string() : "";
    if (!checkpoints.empty()) what += (what.empty() ? "" : " and ") + std::to_string(checkpoints.size()) + " checkpoint(s) in " + ckpt_dir;
    throw ConfigError("run.output_dir " + out.string() + " holds another run (" + what + ") that this run does not resume" +
                      (c.checkpoint.resume == "never" ? " (checkpoint.resume: never)" : "") +
                      "; choose another run.output_dir, or set run.overwrite: true to replace it");
  }
  // Only this run's checkpoints go; any other one stops the run before anything is deleted.
  const RunIdentity me = IdentityOf(c);
  std::string foreign;
  for (const auto& dir : checkpoints) {
    bool ours = FolderIsWithin(dir, out.string());
    try {
      ours = ours || WrittenBy(ReadCheckpoint(dir, CheckpointParts::kManifestOnly), dir, me, false);
    } catch (const std::exception&) {
      // Does not verify: ours only by where it lies.
    }
    if (!ours) foreign += "\n  " + dir;
  }
  if (!foreign.empty()) {
    throw ConfigError("run.overwrite: " + ckpt_dir + " holds checkpoints this run did not write (another run's, or "
                      "ones that do not verify), which it does not delete:" + foreign +
                      "\nuse a checkpoint.dir of this run's own");
  }
  spdlog::warn("run.overwrite: deleting the earlier run's files in {}", out.string());
  for (const char* name : {"metrics.jsonl", "config.resolved.yaml", "chunk_timeline.json"}) fs::remove(out / name, ec);
  for (const auto& dir : checkpoints) fs::remove_all(dir);
  fs::remove(fs::path(ckpt_dir) / "latest", ec);
  return false;
}

void RefuseIncompleteCheckpointFolders(const std::string& dir, int64_t step) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return;
  std::string found;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    int64_t n = 0;
    if (!CanonicalStepName(entry.path().filename().string(), &n) || n <= step) continue;
    if (!fs::exists(entry.path() / kStateFile, ec)) found += "\n  " + entry.path().string();
  }
  if (found.empty()) return;
  throw ConfigError(dir + " holds folders named as checkpoints of later steps but without a state.json (a copy "
                    "cut short? ps_train never leaves one): this run could not save at those steps. Move them "
                    "away:" + found);
}

void DropPartialLastLine(const std::string& path) {
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  if (ec || size == 0) return;
  std::ifstream in(path, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (text.back() == '\n') return;
  const auto last = text.find_last_of('\n');
  fs::resize_file(path, last == std::string::npos ? 0 : last + 1);
  spdlog::warn("{}: dropped a partial last line (the previous process was killed while writing it)", path);
}

void RemoveEventFiles(const std::string& dir) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.path().filename().string().rfind("events.out.tfevents.", 0) == 0) fs::remove(entry.path());
  }
}

}  // namespace ps::trainer
