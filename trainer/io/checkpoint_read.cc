// Reading and verifying a checkpoint folder (ReadCheckpoint, checkpoint.h): the
// manifest's fields range-checked and cross-checked, every listed file's size and
// SHA-256, the tensors sorted into parameters, moments and generator states.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/util/Exception.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "trainer/io/checkpoint.h"
#include "trainer/io/checkpoint_files.h"
#include "trainer/io/file_io.h"

namespace ps::trainer {

namespace fs = std::filesystem;

namespace {

[[noreturn]] void Bad(const std::string& what) { throw CheckpointError(what); }

// `field` of the manifest as an integer in [lo, hi], or Bad naming it.
int64_t IntField(const nlohmann::json& state, const char* field, int64_t lo, int64_t hi, const std::string& where,
                 std::optional<int64_t> absent = std::nullopt) {
  const auto it = state.find(field);
  if (it == state.end()) {
    if (absent) return *absent;
    Bad(where + ": field '" + field + "' is missing");
  }
  if (!it->is_number_integer()) Bad(where + ": field '" + std::string(field) + "' is not an integer (" + it->dump() + ")");
  const int64_t v = it->get<int64_t>();
  if (it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
    Bad(where + ": field '" + std::string(field) + "' is out of range (" + it->dump() + ")");
  }
  if (v < lo || v > hi) {
    Bad(where + ": field '" + std::string(field) + "' is " + std::to_string(v) + ", outside [" + std::to_string(lo) +
        ", " + std::to_string(hi) + "]");
  }
  return v;
}

std::string StringField(const nlohmann::json& state, const char* field, const std::string& where) {
  const auto it = state.find(field);
  if (it == state.end() || !it->is_string()) Bad(where + ": field '" + std::string(field) + "' is missing or not text");
  return it->get<std::string>();
}

// A file of a checkpoint read by `read`: one that does not exist makes the checkpoint
// incomplete (`missing` and the error: a CheckpointError); any other failure to read it
// (EIO, ENOMEM, ...) says nothing of the checkpoint and is thrown as it is (FileIoError).
template <typename Read>
auto ReadCheckpointFile(const std::string& path, const std::string& missing, Read read) {
  try {
    return read(path);
  } catch (const FileIoError& e) {
    if (e.error_number() != ENOENT) throw;
    Bad(missing + e.what());
  }
}
std::vector<char> ReadCheckpointFile(const std::string& path, const std::string& missing) {
  return ReadCheckpointFile(path, missing, [](const std::string& p) { return ReadWholeFile(p); });
}

// The bytes of state.json.
std::string ReadManifestText(const std::string& state_path) {
  const std::vector<char> bytes =
      ReadCheckpointFile(state_path, state_path + ": missing (not a complete checkpoint): ");
  return std::string(bytes.begin(), bytes.end());
}

void CheckManifestHash(const std::string& folder, const std::string& state_path, const std::string& text) {
  const std::string hash_path = (fs::path(folder) / kManifestHashFile).string();
  const std::vector<char> bytes =
      ReadCheckpointFile(hash_path, hash_path + ": missing (a format-2 checkpoint's manifest must be hashed): ");
  const std::string recorded(bytes.begin(), bytes.end());
  Sha256 hash;
  hash.Update(text.data(), text.size());
  const std::string expected = hash.HexDigest() + "  " + kStateFile + "\n";
  if (recorded != expected) {
    Bad(state_path + ": SHA-256 " + expected.substr(0, 64) + " does not match " + hash_path +
        " (the manifest was edited or is corrupt)");
  }
}

// A folder named step_<N> holds the checkpoint of step N.
void CheckFolderNamesStep(const std::string& folder, const std::string& state_path, int64_t step) {
  int64_t named_step = 0;
  const std::string name = fs::path(folder).lexically_normal().filename().string();
  const std::string base = name.empty() ? fs::path(folder).lexically_normal().parent_path().filename().string() : name;
  static const std::regex kStepDigits("step_[0-9]+");
  if (std::regex_match(base, kStepDigits) && (!CanonicalStepName(base, &named_step) || named_step != step)) {
    Bad(state_path + ": field 'step' is " + std::to_string(step) + " but the folder is named " + base +
        " (a checkpoint folder's name is its step)");
  }
}

constexpr int64_t kMaxCount = int64_t{1} << 62;

// Format 2 on: the writing run and the sampler's schedule, which must give consumed_samples.
void ParseRunAndSamples(const nlohmann::json& state, const std::string& state_path, CheckpointContents& c) {
  constexpr int64_t kMax = kMaxCount;
  c.run_name = StringField(state, "run_name", state_path);
  c.run_output_dir = StringField(state, "run_output_dir", state_path);
  const auto samples = state.find("samples");
  if (samples == state.end() || !samples->is_object()) Bad(state_path + ": field 'samples' is missing");
  const std::string where = state_path + " samples";
  c.samples.start_step = IntField(*samples, "start_step", 0, c.step, where);
  c.samples.consumed_at_start = IntField(*samples, "consumed_at_start", 0, c.consumed_samples, where);
  c.samples.global_batch_size = IntField(*samples, "global_batch_size", 1, kMax, where);
  const int64_t steps = c.step - c.samples.start_step;
  const __int128 expected = static_cast<__int128>(c.samples.consumed_at_start) +
                            static_cast<__int128>(steps) * c.samples.global_batch_size;
  if (c.consumed_samples != expected) {
    Bad(state_path + ": field 'consumed_samples' is " + std::to_string(c.consumed_samples) + ", but the schedule (" +
        std::to_string(c.samples.consumed_at_start) + " at step " + std::to_string(c.samples.start_step) + ", then " +
        std::to_string(c.samples.global_batch_size) + " per step) gives " +
        std::to_string(static_cast<int64_t>(std::min<__int128>(expected, INT64_MAX))) + " at step " +
        std::to_string(c.step));
  }
}

// Format 1 named no run: its resolved config did.
std::string RunNameOfFormat1(const std::string& config_yaml, const std::string& state_path) {
  try {
    const YAML::Node root = YAML::Load(config_yaml);
    if (root["run"] && root["run"]["name"]) return root["run"]["name"].as<std::string>();
  } catch (const YAML::Exception& e) {
    Bad(state_path + ": field 'config' is not valid YAML (" + e.what() + ")");
  }
  return "";
}

// tokens_seen is consumed_samples whole sequences (when the fingerprint has the length).
void CheckTokensSeen(const CheckpointContents& c, const std::string& state_path) {
  constexpr int64_t kMax = kMaxCount;
  const auto seq_len = c.fingerprint.find("data.seq_len");
  if (seq_len == c.fingerprint.end()) return;
  if (!seq_len->is_number_integer() || seq_len->get<int64_t>() < 1) Bad(state_path + ": fingerprint data.seq_len is invalid");
  const int64_t len = seq_len->get<int64_t>();
  if (c.consumed_samples > kMax / len || c.tokens_seen != c.consumed_samples * len) {
    Bad(state_path + ": field 'tokens_seen' is " + std::to_string(c.tokens_seen) + ", but it must be " +
        std::to_string(c.consumed_samples) + " samples x " + std::to_string(len) + " tokens");
  }
}

// Per-parameter update counts: none beyond the step; all that updated agree; without
// fp16's skipped steps, they updated at every step.
void CheckAdamSteps(const CheckpointContents& c, const std::string& state_path) {
  int64_t updated = 0;
  for (const auto& [param, steps] : c.engine.adam_steps) {
    if (steps < 0 || steps > c.step) {
      Bad(state_path + ": adam_steps of '" + param + "' is " + std::to_string(steps) + ", outside [0, step " +
          std::to_string(c.step) + "]");
    }
    if (steps == 0) continue;
    if (updated != 0 && steps != updated) {
      Bad(state_path + ": adam_steps disagree: '" + param + "' has " + std::to_string(steps) + ", others " +
          std::to_string(updated));
    }
    updated = steps;
  }
  const bool fp16 = c.fingerprint.value("precision.dtype", std::string()) == "fp16";
  if (!fp16 && !c.engine.adam_steps.empty() && updated != c.step) {
    Bad(state_path + ": adam_steps are " + std::to_string(updated) + ", but every step of a " +
        c.fingerprint.value("precision.dtype", std::string("?")) + " run updates: step is " + std::to_string(c.step));
  }
}

// Parses and range-checks the manifest into `c` (scalars, run, fingerprint); returns
// the "files" object. Cross-checks that need the tensors come later.
nlohmann::json ParseManifest(const std::string& folder, const std::string& state_path, CheckpointContents& c,
                             int64_t* saved_by_ranks) {
  const std::string text = ReadManifestText(state_path);
  nlohmann::json state;
  try {
    state = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    Bad(state_path + ": not valid JSON (" + e.what() + ")");
  }
  if (!state.is_object()) Bad(state_path + ": not a JSON object");
  if (state.value("format", std::string()) != "ps_train checkpoint") Bad(state_path + ": not a ps_train checkpoint");
  const int64_t format = IntField(state, "format_version", 1, kCheckpointFormatVersion, state_path);
  if (format >= 2) CheckManifestHash(folder, state_path, text);
  constexpr int64_t kMax = kMaxCount;
  c.step = IntField(state, "step", 1, 999999999999999999, state_path);
  CheckFolderNamesStep(folder, state_path, c.step);
  c.consumed_samples = IntField(state, "consumed_samples", 0, kMax, state_path);
  c.tokens_seen = IntField(state, "tokens_seen", 0, kMax, state_path);
  c.min_scale_skips = IntField(state, "min_scale_skips", 0, c.step, state_path, int64_t{0});
  *saved_by_ranks = IntField(state, "saved_by_ranks", 1, 1 << 20, state_path, int64_t{1});
  c.version = StringField(state, "version", state_path);
  c.config_yaml = StringField(state, "config", state_path);
  try {
    c.engine.extra = state.at("engine");
    c.fingerprint = state.at("fingerprint");
    c.engine.adam_steps = state.at("adam_steps").get<std::map<std::string, int64_t>>();
  } catch (const nlohmann::json::exception& e) {
    Bad(state_path + ": malformed (" + e.what() + ")");
  }
  if (!c.fingerprint.is_object()) Bad(state_path + ": field 'fingerprint' is not an object");
  if (format >= 2) {
    ParseRunAndSamples(state, state_path, c);
  } else {
    c.run_name = RunNameOfFormat1(c.config_yaml, state_path);
  }
  CheckTokensSeen(c, state_path);
  CheckAdamSteps(c, state_path);
  const auto files = state.find("files");
  if (files == state.end() || !files->is_object() || files->empty()) Bad(state_path + ": lists no files");
  return *files;
}

// The RNG states a resume restores: present, bytes, and (CPU) a valid generator state.
void CheckRngStates(const models::TensorMap& rng, const std::string& file) {
  const auto cpu = rng.find("rng.cpu");
  if (cpu == rng.end()) Bad(file + ": the random generator state 'rng.cpu' is missing");
  for (const auto& [name, t] : rng) {
    if (t.scalar_type() != at::kByte || t.dim() != 1) Bad(file + ": '" + name + "' is not a byte vector");
  }
  try {
    at::Generator probe = at::make_generator<at::CPUGeneratorImpl>();
    probe.set_state(cpu->second);
  } catch (const c10::Error& e) {
    Bad(file + ": 'rng.cpu' is not a valid CPU generator state (" + e.what_without_backtrace() + ")");
  }
}

// Listed file `file` (entry `entry` of the manifest, named `name`): its size and SHA-256
// checked against the entry (read a few MiB at a time), then its tensors as views of a
// memory map of it (models/safetensors.h, MapSafetensors): no copy of the file is held,
// so a checkpoint larger than host memory loads (the map's pages are the file's, read
// when touched and reclaimable; the engine copies each tensor where it goes).
models::TensorMap ReadListedFile(const std::string& file, const nlohmann::json& entry, const std::string& name,
                                 const std::string& state_path) {
  int64_t expected_bytes = 0;
  std::string expected_sha;
  try {
    expected_bytes = entry.at("bytes").get<int64_t>();
    expected_sha = entry.at("sha256").get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    Bad(state_path + ": the entry of " + name + " is malformed (" + e.what() + ")");
  }
  int64_t bytes = 0;
  const std::string sha = ReadCheckpointFile(file, "", [&](const std::string& p) { return FileSha256(p, &bytes); });
  if (bytes != expected_bytes) {
    Bad(file + ": " + std::to_string(bytes) + " bytes, " + state_path + " says " + std::to_string(expected_bytes) +
        " (truncated or replaced)");
  }
  if (sha != expected_sha) Bad(file + ": SHA-256 " + sha + " does not match " + state_path + " (the file is corrupt)");
  models::TensorMap tensors;
  try {
    tensors = models::MapSafetensors(file);
  } catch (const c10::Error& e) {
    Bad(e.what_without_backtrace());
  }
  return tensors;
}

// The tensors of one file into `c`: parameters, Adam moments (by prefix) or generator
// states; `read_model` set when a parameter came.
void SortTensorsInto(CheckpointContents& c, const models::TensorMap& tensors, const std::string& file,
                     bool* read_model) {
  for (const auto& [name, tensor] : tensors) {
    models::TensorMap* target = &c.engine.params;
    std::string key = name;
    if (StartsWith(name, kExpAvgSq)) {
      target = &c.engine.exp_avg_sq;
      key = name.substr(sizeof(kExpAvgSq) - 1);
    } else if (StartsWith(name, kExpAvg)) {
      target = &c.engine.exp_avg;
      key = name.substr(sizeof(kExpAvg) - 1);
    } else if (StartsWith(name, "rng.")) {
      target = &c.rng;
    } else {
      *read_model = true;
    }
    if (!target->emplace(key, tensor).second) Bad(file + ": tensor '" + name + "' is also in another file");
  }
}

}  // namespace

CheckpointContents ReadCheckpoint(const std::string& path, CheckpointParts parts) {
  const std::string state_path = (fs::path(path) / kStateFile).string();
  if (!fs::is_directory(path)) {
    Bad(path + ": not a checkpoint folder (it " + (fs::exists(path) ? "is a file" : "does not exist") + ")");
  }
  CheckpointContents c;
  int64_t saved_by_ranks = 1;
  const nlohmann::json files = ParseManifest(path, state_path, c, &saved_by_ranks);
  // Every listed file is present in every mode; its bytes are read as `parts` asks.
  bool read_model = false;
  for (auto it = files.begin(); it != files.end(); ++it) {
    const std::string file = (fs::path(path) / it.key()).string();
    if (it.key().find('/') != std::string::npos || it.key() == ".." || it.key() == "." ||
        it.key() == kStateFile || it.key() == kManifestHashFile) {
      Bad(state_path + ": file name '" + it.key() + "' is not a tensor file of the folder");
    }
    if (!fs::is_regular_file(file)) Bad(file + ": missing (listed in " + state_path + ")");
    if (parts == CheckpointParts::kManifestOnly ||
        (parts == CheckpointParts::kParamsOnly && (StartsWith(it.key(), "optimizer") || StartsWith(it.key(), "rng")))) {
      continue;
    }
    const models::TensorMap tensors = ReadListedFile(file, it.value(), it.key(), state_path);
    SortTensorsInto(c, tensors, file, &read_model);
  }
  if (read_model) {  // the update counts name exactly the parameters
    for (const auto& [name, tensor] : c.engine.params) {
      if (!c.engine.adam_steps.count(name)) Bad(state_path + ": adam_steps has no entry for parameter '" + name + "'");
    }
    for (const auto& [name, steps] : c.engine.adam_steps) {
      if (!c.engine.params.count(name)) Bad(state_path + ": adam_steps names '" + name + "', not a parameter of the checkpoint");
    }
  }
  if (parts == CheckpointParts::kAll) CheckRngStates(c.rng, (fs::path(path) / kRngFile).string());
  // For error messages: the file, or the pattern of the shards of a multi-rank save.
  const bool sharded = saved_by_ranks > 1;
  c.engine.params_file = (fs::path(path) / (sharded ? "model.rank*.safetensors" : "model.safetensors")).string();
  c.engine.optimizer_file =
      (fs::path(path) / (sharded ? "optimizer.rank*.safetensors" : "optimizer.safetensors")).string();
  return c;
}

}  // namespace ps::trainer
