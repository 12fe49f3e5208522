#include "trainer/checkpoint.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <yaml-cpp/yaml.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <optional>
#include <regex>
#include <set>

#include "trainer/file_io.h"
#include "trainer/run_folder.h"

namespace ps::trainer {
namespace {

namespace fs = std::filesystem;

constexpr char kRngFile[] = "rng.safetensors";
constexpr char kStateFile[] = "state.json";
constexpr char kManifestHashFile[] = "manifest.sha256";
constexpr char kExpAvg[] = "optimizer.exp_avg.";
constexpr char kExpAvgSq[] = "optimizer.exp_avg_sq.";

struct FileEntry {
  int64_t bytes = 0;
  std::string sha256;
};

// One safetensors file, streamed tensor by tensor (one host copy at a time), hashed as
// it is written, fsynced. Hashing a tensor runs on a second thread while its bytes are
// written, so a save costs max(disk, SHA-256) rather than their sum (SHA-256 with the
// CPU's SHA extensions: ~1.5 GB/s a core, slower than an NVMe disk).
FileEntry WriteTensorFile(const std::string& path, const models::TensorMap& tensors) {
  CheckedFile out(path, CheckedFile::Mode::kTruncate);
  Sha256 hash;
  auto put = [&](const void* data, size_t bytes) {
    if (bytes < (size_t{1} << 20)) {
      out.Write(data, bytes);
      hash.Update(data, bytes);
      return;
    }
    auto hashed = std::async(std::launch::async, [&] { hash.Update(data, bytes); });
    try {
      out.Write(data, bytes);
    } catch (...) {
      hashed.wait();  // the hasher reads `data`: let it finish before unwinding
      throw;
    }
    hashed.get();
  };
  const std::string header = models::SafetensorsHeader(tensors);
  const uint64_t header_bytes = header.size();
  put(&header_bytes, 8);
  put(header.data(), header.size());
  for (const auto& [name, tensor] : tensors) {
    const at::Tensor host = tensor.detach().to(at::kCPU).contiguous();
    put(host.data_ptr(), static_cast<size_t>(host.numel()) * host.element_size());
  }
  out.Sync();
  out.Close();
  return {out.bytes_written(), hash.HexDigest()};
}

models::TensorMap Prefixed(const models::TensorMap& tensors, const std::string& prefix) {
  models::TensorMap out;
  for (const auto& [name, t] : tensors) out.emplace(prefix + name, t);
  return out;
}

bool StartsWith(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

}  // namespace

std::string TmpCheckpointFolder(const std::string& dir, int64_t step) {
  return (fs::path(dir) / (".tmp_step_" + std::to_string(step))).string();
}

std::string OpenCheckpointFolder(const std::string& dir, int64_t step) {
  if (!fs::exists(dir)) {
    fs::create_directories(dir);
    const fs::path parent = fs::absolute(dir).parent_path();
    SyncDirectory(parent.string());  // the new folder itself survives a power loss
  }
  const std::string tmp = TmpCheckpointFolder(dir, step);
  std::error_code ignored;
  fs::remove_all(tmp, ignored);
  fs::create_directories(tmp);
  return tmp;
}

void AbandonCheckpoint(const std::string& dir, int64_t step) {
  std::error_code ignored;
  fs::remove_all(TmpCheckpointFolder(dir, step), ignored);
}

static std::string ShardFileName(const char* kind, int rank, int world) {
  if (world <= 1) return std::string(kind) + ".safetensors";
  return std::string(kind) + ".rank" + std::to_string(rank) + ".safetensors";
}

nlohmann::json WriteCheckpointShard(const std::string& folder, const CheckpointContents& c, int rank, int world) {
  nlohmann::json files = nlohmann::json::object();
  auto write = [&](const std::string& file, const models::TensorMap& tensors) {
    const FileEntry e = WriteTensorFile((fs::path(folder) / file).string(), tensors);
    files[file] = {{"bytes", e.bytes}, {"sha256", e.sha256}};
  };
  write(ShardFileName("model", rank, world), c.engine.params);
  models::TensorMap optimizer = Prefixed(c.engine.exp_avg, kExpAvg);
  optimizer.merge(Prefixed(c.engine.exp_avg_sq, kExpAvgSq));
  write(ShardFileName("optimizer", rank, world), optimizer);
  if (rank == 0) write(kRngFile, c.rng);
  return files;
}

CheckpointWriteReport CommitCheckpoint(const std::string& dir, const CheckpointContents& c, const nlohmann::json& files,
                                       int world) {
  const auto start = std::chrono::steady_clock::now();
  CheckpointWriteReport report;
  const std::string name = "step_" + std::to_string(c.step);
  const fs::path final_path = fs::path(dir) / name;
  report.path = final_path.string();
  const fs::path tmp = TmpCheckpointFolder(dir, c.step);
  const fs::path old = fs::path(dir) / (".old_" + name);
  std::error_code ignored;
  try {
    for (auto it = files.begin(); it != files.end(); ++it) report.bytes += it.value().at("bytes").get<int64_t>();
    const nlohmann::json state = {{"format", "ps_train checkpoint"},
                                  {"format_version", kCheckpointFormatVersion},
                                  {"version", c.version},
                                  {"step", c.step},
                                  {"consumed_samples", c.consumed_samples},
                                  {"tokens_seen", c.tokens_seen},
                                  {"min_scale_skips", c.min_scale_skips},
                                  {"adam_steps", c.engine.adam_steps},
                                  {"engine", c.engine.extra},
                                  {"samples",
                                   {{"start_step", c.samples.start_step},
                                    {"consumed_at_start", c.samples.consumed_at_start},
                                    {"global_batch_size", c.samples.global_batch_size}}},
                                  {"run_name", c.run_name},
                                  {"run_output_dir", c.run_output_dir},
                                  {"fingerprint", c.fingerprint},
                                  {"config", c.config_yaml},
                                  {"saved_by_ranks", world},
                                  {"files", files}};
    const std::string manifest = state.dump(2) + "\n";
    Sha256 manifest_hash;
    manifest_hash.Update(manifest.data(), manifest.size());
    for (const auto& [file, text] : {std::pair<const char*, std::string>{kStateFile, manifest},
                                     {kManifestHashFile, manifest_hash.HexDigest() + "  " + kStateFile + "\n"}}) {
      CheckedFile out((tmp / file).string(), CheckedFile::Mode::kTruncate);
      out.Write(text);
      out.Sync();
      out.Close();
      report.bytes += out.bytes_written();
    }
    SyncDirectory(tmp.string());
    // A folder of this step already (a run resumed from an earlier step saves it again;
    // it may be the corrupt one resume skipped): moved aside only now that the new one
    // is complete, and deleted after the new one is in place.
    if (fs::exists(fs::symlink_status(final_path))) {
      bool ours = false;
      try {
        const RunIdentity writer{c.run_name, c.run_output_dir, c.fingerprint};
        ours = WrittenBy(ReadCheckpoint(final_path.string(), CheckpointParts::kManifestOnly), final_path.string(), writer,
                         false);
      } catch (const std::exception&) {
        // Does not verify: not provably this run's.
      }
      if (!ours) {
        throw std::runtime_error(final_path.string() + " exists and is not a checkpoint of this run (another run's, or "
                                 "one that does not verify): it is not replaced; move it away");
      }
      fs::remove_all(old, ignored);
      fs::rename(final_path, old);
    }
    fs::rename(tmp, final_path);
    SyncDirectory(dir);
    fs::remove_all(old, ignored);
  } catch (...) {
    fs::remove_all(tmp, ignored);
    if (!fs::exists(final_path) && fs::exists(old)) fs::rename(old, final_path, ignored);  // put the old one back
    throw;
  }
  WriteFileAtomically((fs::path(dir) / "latest").string(), name + "\n");
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

CheckpointWriteReport WriteCheckpoint(const std::string& dir, const CheckpointContents& c) {
  const auto start = std::chrono::steady_clock::now();
  const std::string tmp = OpenCheckpointFolder(dir, c.step);
  nlohmann::json files;
  try {
    files = WriteCheckpointShard(tmp, c, /*rank=*/0, /*world=*/1);
  } catch (...) {
    AbandonCheckpoint(dir, c.step);
    throw;
  }
  CheckpointWriteReport report = CommitCheckpoint(dir, c, files, 1);
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

namespace {

[[noreturn]] void Bad(const std::string& what) { throw CheckpointError(what); }

// step_<N> with N written canonically (no sign, no leading zero, at most 18 digits).
bool CanonicalStepName(const std::string& name, int64_t* step) {
  static const std::regex kName("step_(0|[1-9][0-9]{0,17})");
  std::smatch m;
  if (!std::regex_match(name, m, kName)) return false;
  if (step) *step = std::stoll(m[1].str());
  return true;
}

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

// The bytes of state.json.
std::string ReadManifestText(const std::string& state_path) {
  std::vector<char> bytes;
  try {
    bytes = ReadWholeFile(state_path);
  } catch (const std::runtime_error& e) {
    Bad(state_path + ": missing or unreadable (not a complete checkpoint): " + e.what());
  }
  return std::string(bytes.begin(), bytes.end());
}

void CheckManifestHash(const std::string& folder, const std::string& state_path, const std::string& text) {
  const std::string hash_path = (fs::path(folder) / kManifestHashFile).string();
  std::string recorded;
  try {
    const std::vector<char> bytes = ReadWholeFile(hash_path);
    recorded.assign(bytes.begin(), bytes.end());
  } catch (const std::runtime_error& e) {
    Bad(hash_path + ": missing (a format-2 checkpoint's manifest must be hashed): " + e.what());
  }
  Sha256 hash;
  hash.Update(text.data(), text.size());
  const std::string expected = hash.HexDigest() + "  " + kStateFile + "\n";
  if (recorded != expected) {
    Bad(state_path + ": SHA-256 " + expected.substr(0, 64) + " does not match " + hash_path +
        " (the manifest was edited or is corrupt)");
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
  constexpr int64_t kMax = int64_t{1} << 62;
  c.step = IntField(state, "step", 1, 999999999999999999, state_path);
  int64_t named_step = 0;
  const std::string name = fs::path(folder).lexically_normal().filename().string();
  const std::string base = name.empty() ? fs::path(folder).lexically_normal().parent_path().filename().string() : name;
  static const std::regex kStepDigits("step_[0-9]+");
  if (std::regex_match(base, kStepDigits) && (!CanonicalStepName(base, &named_step) || named_step != c.step)) {
    Bad(state_path + ": field 'step' is " + std::to_string(c.step) + " but the folder is named " + base +
        " (a checkpoint folder's name is its step)");
  }
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
          std::to_string(c.samples.global_batch_size) + " per step) gives " + std::to_string(static_cast<int64_t>(
          std::min<__int128>(expected, INT64_MAX))) + " at step " +
          std::to_string(c.step));
    }
  } else {
    // Format 1 named no run: its resolved config did.
    try {
      const YAML::Node root = YAML::Load(c.config_yaml);
      if (root["run"] && root["run"]["name"]) c.run_name = root["run"]["name"].as<std::string>();
    } catch (const YAML::Exception& e) {
      Bad(state_path + ": field 'config' is not valid YAML (" + e.what() + ")");
    }
  }
  const auto seq_len = c.fingerprint.find("data.seq_len");
  if (seq_len != c.fingerprint.end()) {
    if (!seq_len->is_number_integer() || seq_len->get<int64_t>() < 1) Bad(state_path + ": fingerprint data.seq_len is invalid");
    const int64_t len = seq_len->get<int64_t>();
    if (c.consumed_samples > kMax / len || c.tokens_seen != c.consumed_samples * len) {
      Bad(state_path + ": field 'tokens_seen' is " + std::to_string(c.tokens_seen) + ", but it must be " +
          std::to_string(c.consumed_samples) + " samples x " + std::to_string(len) + " tokens");
    }
  }
  // Per-parameter update counts: none beyond the step; all that updated agree; without
  // fp16's skipped steps, they updated at every step.
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
  std::set<std::string> model_params;
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
    int64_t expected_bytes = 0;
    std::string expected_sha;
    try {
      expected_bytes = it.value().at("bytes").get<int64_t>();
      expected_sha = it.value().at("sha256").get<std::string>();
    } catch (const nlohmann::json::exception& e) {
      Bad(state_path + ": the entry of " + it.key() + " is malformed (" + e.what() + ")");
    }
    std::vector<char> contents;  // read once: hashed, then parsed
    try {
      contents = ReadWholeFile(file);
    } catch (const std::runtime_error& e) {
      Bad(e.what());  // a read error: reported like any other bad file
    }
    const int64_t bytes = static_cast<int64_t>(contents.size());
    Sha256 hash;
    hash.Update(contents.data(), contents.size());
    const std::string sha = hash.HexDigest();
    if (bytes != expected_bytes) {
      Bad(file + ": " + std::to_string(bytes) + " bytes, " + state_path + " says " + std::to_string(expected_bytes) +
          " (truncated or replaced)");
    }
    if (sha != expected_sha) Bad(file + ": SHA-256 " + sha + " does not match " + state_path + " (the file is corrupt)");
    models::TensorMap tensors;
    try {
      tensors = models::ParseSafetensors(file, contents);
    } catch (const c10::Error& e) {
      Bad(e.what_without_backtrace());
    }
    for (auto& [name, tensor] : tensors) {
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
        read_model = true;
      }
      if (!target->emplace(key, tensor).second) Bad(file + ": tensor '" + name + "' is also in another file");
    }
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

std::vector<std::string> ListCheckpoints(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return {};
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    int64_t step = 0;
    if (!CanonicalStepName(entry.path().filename().string(), &step) || !fs::exists(entry.path() / kStateFile)) continue;
    found.emplace_back(step, entry.path().string());
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(std::move(f.second));
  return out;
}

std::vector<std::string> StrayCheckpointFolders(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  static const std::regex kLooksLike("step_.*");
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (!std::regex_match(name, kLooksLike) || CanonicalStepName(name, nullptr)) continue;
    if (name.size() > 9 && name.compare(name.size() - 9, 9, ".unusable") == 0) continue;  // set aside by a run
    out.push_back(entry.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool WrittenBy(const CheckpointContents& manifest, const std::string& path, const RunIdentity& run,
               bool same_fingerprint) {
  if (manifest.run_name != run.name) return false;
  if (same_fingerprint && manifest.fingerprint != run.fingerprint) return false;
  if (FolderIsWithin(path, run.output_dir)) return true;
  return !manifest.run_output_dir.empty() && FolderIsWithin(manifest.run_output_dir, run.output_dir) &&
         FolderIsWithin(run.output_dir, manifest.run_output_dir);
}

std::vector<std::string> PruneCheckpoints(const std::string& dir, int64_t keep, const std::string& written,
                                          const RunIdentity& run) {
  std::vector<std::string> deleted;
  std::error_code ec;
  // Leftovers of interrupted saves first: a .old_step_N whose new step_N never landed is
  // the complete old checkpoint, put back; other .old_ and .tmp_ folders go.
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (StartsWith(name, ".old_step_")) {
      const fs::path back = fs::path(dir) / name.substr(5);
      if (!fs::exists(back)) {
        fs::rename(entry.path(), back, ec);
        continue;
      }
    }
    if (StartsWith(name, ".tmp_step_") || StartsWith(name, ".old_step_") || name == "latest.tmp") {
      fs::remove_all(entry.path(), ec);
      deleted.push_back(entry.path().string());
    }
  }
  // This run's checkpoints, newest first by the step in their names.
  std::vector<std::string> own;
  for (const auto& path : ListCheckpoints(dir)) {
    try {
      if (WrittenBy(ReadCheckpoint(path, CheckpointParts::kManifestOnly), path, run, true)) own.push_back(path);
    } catch (const std::exception&) {
      // Its manifest fails: not provably this run's, so never deleted.
    }
  }
  for (size_t i = static_cast<size_t>(std::max<int64_t>(keep, 1)); i < own.size(); ++i) {
    if (own[i] == written) continue;  // never the checkpoint just written
    fs::remove_all(own[i], ec);
    if (ec) throw std::runtime_error(own[i] + ": could not delete (" + ec.message() + ")");
    deleted.push_back(own[i]);
  }
  return deleted;
}

}  // namespace ps::trainer
