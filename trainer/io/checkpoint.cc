#include "trainer/io/checkpoint.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <yaml-cpp/yaml.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <optional>
#include <regex>
#include <set>
#include <utility>
#include <vector>

#include "trainer/io/checkpoint_files.h"
#include "trainer/io/file_io.h"
#include "trainer/io/run_folder.h"

namespace ps::trainer {
namespace {

namespace fs = std::filesystem;

struct FileEntry {
  int64_t bytes = 0;
  std::string sha256;
};

// One safetensors file, streamed tensor by tensor (one host copy at a time), hashed as
// it is written, fsynced. Hashing a tensor runs on a second thread while its bytes are
// written, so a save costs max(disk, SHA-256) rather than their sum (SHA-256 with the
// CPU's SHA extensions: ~1.5 GB/s a core, slower than an NVMe disk).
// `fetch(name)`: the values of a meta-device tensor of `tensors` (EngineState::deferred),
// read as it is written; `position(name)`: where they are stored. The data lies in the
// file as written: the tensors in memory in name order, then the meta-device ones in
// increasing position, so each stored unit is read once (the header lists every tensor
// by name, offsets following the data).
using Fetch = std::function<at::Tensor(const std::string& name)>;
using Position = std::function<std::array<int64_t, 3>(const std::string& name)>;

std::vector<std::string> DataOrder(const models::TensorMap& tensors, const Position& position) {
  std::vector<std::string> order;
  std::vector<std::pair<std::array<int64_t, 3>, std::string>> deferred;
  for (const auto& [name, tensor] : tensors) {
    if (tensor.is_meta() && position) {
      deferred.emplace_back(position(name), name);
    } else {
      order.push_back(name);
    }
  }
  std::sort(deferred.begin(), deferred.end());
  for (auto& d : deferred) order.push_back(std::move(d.second));
  return order;
}

// Passes the bytes of `values` to `put`: a host tensor's at once, another device's in pieces
// of at most 64 MiB through one host buffer (no whole host copy of a GPU embedding's master).
template <typename Put>
void PutValues(const at::Tensor& values, const Put& put) {
  const at::Tensor t = values.detach();
  const auto element_bytes = static_cast<int64_t>(t.element_size());
  if (t.is_cpu()) {
    const at::Tensor host = t.contiguous();
    put(host.data_ptr(), static_cast<size_t>(host.numel() * element_bytes));
    return;
  }
  const at::Tensor flat = t.contiguous().reshape({-1});
  const int64_t per_piece = std::max<int64_t>(1, (int64_t{64} << 20) / element_bytes);
  const at::Tensor buffer = at::empty({std::min(per_piece, flat.numel())}, flat.options().device(at::kCPU));
  for (int64_t from = 0; from < flat.numel(); from += per_piece) {
    const int64_t n = std::min(per_piece, flat.numel() - from);
    at::Tensor piece = buffer.narrow(0, 0, n);
    piece.copy_(flat.narrow(0, from, n));
    put(piece.data_ptr(), static_cast<size_t>(n * element_bytes));
  }
}

FileEntry WriteTensorFile(const std::string& path, const models::TensorMap& tensors, const Fetch& fetch = {},
                          const Position& position = {}) {
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
  const std::vector<std::string> order = DataOrder(tensors, position);
  const std::string header = models::SafetensorsHeader(tensors, order);
  const uint64_t header_bytes = header.size();
  put(&header_bytes, 8);
  put(header.data(), header.size());
  for (const std::string& name : order) {
    const at::Tensor& tensor = tensors.at(name);
    at::Tensor values = tensor;
    if (tensor.is_meta()) {
      TORCH_CHECK(fetch, "checkpoint: '", name, "' has no values (a deferred tensor without a reader)");
      values = fetch(name);
      TORCH_CHECK(values.sizes() == tensor.sizes() && values.scalar_type() == tensor.scalar_type(), "checkpoint: '",
                  name, "' was read as ", values.sizes(), " ", values.scalar_type(), ", declared ", tensor.sizes(), " ",
                  tensor.scalar_type());
    }
    PutValues(values, put);
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

}  // namespace

// step_<N> with N written canonically (no sign, no leading zero, at most 18 digits).
bool CanonicalStepName(const std::string& name, int64_t* step) {
  static const std::regex kName("step_(0|[1-9][0-9]{0,17})");
  std::smatch m;
  if (!std::regex_match(name, m, kName)) return false;
  if (step) *step = std::stoll(m[1].str());
  return true;
}

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
  struct FinishDeferred {  // after the last read, whether the writes succeed or not
    DeferredValues* deferred;
    ~FinishDeferred() {
      if (deferred != nullptr) deferred->Finish();
    }
  } finish{c.engine.deferred.get()};
  nlohmann::json files = nlohmann::json::object();
  auto write = [&](const std::string& file, const models::TensorMap& tensors, const Fetch& fetch,
                   const Position& position) {
    const FileEntry e = WriteTensorFile((fs::path(folder) / file).string(), tensors, fetch, position);
    files[file] = {{"bytes", e.bytes}, {"sha256", e.sha256}};
  };
  DeferredValues* deferred = c.engine.deferred.get();
  // An optimizer file key: its map and the parameter's name.
  const std::string exp_avg = kExpAvg, exp_avg_sq = kExpAvgSq;
  auto split = [&](const std::string& key) -> std::pair<const char*, std::string> {
    const bool sq = key.rfind(exp_avg_sq, 0) == 0;
    return {sq ? "exp_avg_sq" : "exp_avg", key.substr((sq ? exp_avg_sq : exp_avg).size())};
  };
  Fetch params, moments;
  Position param_at, moment_at;
  if (deferred != nullptr) {
    params = [deferred](const std::string& key) { return deferred->Read("params", key); };
    param_at = [deferred](const std::string& key) { return deferred->Position("params", key); };
    moments = [&, deferred](const std::string& key) {
      const auto [map, name] = split(key);
      return deferred->Read(map, name);
    };
    moment_at = [&, deferred](const std::string& key) {
      const auto [map, name] = split(key);
      return deferred->Position(map, name);
    };
  }
  write(ShardFileName("model", rank, world), c.engine.params, params, param_at);
  models::TensorMap optimizer = Prefixed(c.engine.exp_avg, kExpAvg);
  optimizer.merge(Prefixed(c.engine.exp_avg_sq, kExpAvgSq));
  write(ShardFileName("optimizer", rank, world), optimizer, moments, moment_at);
  if (rank == 0) write(kRngFile, c.rng, {}, {});
  return files;
}

namespace {

// state.json of checkpoint `c` whose files are `files`, saved by `world` ranks.
nlohmann::json ManifestOf(const CheckpointContents& c, const nlohmann::json& files, int world) {
  return {{"format", "ps_train checkpoint"},
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
}

// Writes state.json and its hash file into `folder`, synced; returns the bytes written.
int64_t WriteManifest(const fs::path& folder, const nlohmann::json& state) {
  const std::string manifest = state.dump(2) + "\n";
  Sha256 manifest_hash;
  manifest_hash.Update(manifest.data(), manifest.size());
  int64_t bytes = 0;
  for (const auto& [file, text] : {std::pair<const char*, std::string>{kStateFile, manifest},
                                   {kManifestHashFile, manifest_hash.HexDigest() + "  " + kStateFile + "\n"}}) {
    CheckedFile out((folder / file).string(), CheckedFile::Mode::kTruncate);
    out.Write(text);
    out.Sync();
    out.Close();
    bytes += out.bytes_written();
  }
  SyncDirectory(folder.string());
  return bytes;
}

// A folder of this step already (a run resumed from an earlier step saves it again; it
// may be the corrupt one resume skipped): moved to `old` if it is this run's, so the new
// one can take its place; throws (and keeps it) if it is not provably this run's.
void MoveAsideOwnStep(const fs::path& final_path, const fs::path& old, const CheckpointContents& c) {
  if (!fs::exists(fs::symlink_status(final_path))) return;
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
  std::error_code ignored;
  fs::remove_all(old, ignored);
  fs::rename(final_path, old);
}

}  // namespace

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
    report.bytes += WriteManifest(tmp, ManifestOf(c, files, world));
    // An earlier folder of this step is replaced only now that the new one is complete,
    // and deleted once the new one is in place.
    MoveAsideOwnStep(final_path, old, c);
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
