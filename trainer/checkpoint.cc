#include "trainer/checkpoint.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <regex>

#include "trainer/file_io.h"

namespace ps::trainer {
namespace {

namespace fs = std::filesystem;

constexpr char kRngFile[] = "rng.safetensors";
constexpr char kStateFile[] = "state.json";
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

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  TORCH_CHECK(in.good(), path, ": missing (not a complete checkpoint)");
  try {
    return nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    TORCH_CHECK(false, path, ": not valid JSON (", e.what(), ")");
  }
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
                                  {"fingerprint", c.fingerprint},
                                  {"config", c.config_yaml},
                                  {"saved_by_ranks", world},
                                  {"files", files}};
    CheckedFile out((tmp / kStateFile).string(), CheckedFile::Mode::kTruncate);
    out.Write(state.dump(2) + "\n");
    out.Sync();
    out.Close();
    report.bytes += out.bytes_written();
    SyncDirectory(tmp.string());
    // A folder of this step already (a run resumed from an earlier step saves it again;
    // it may be the corrupt one resume skipped): moved aside only now that the new one
    // is complete, and deleted after the new one is in place.
    if (fs::exists(final_path)) {
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

CheckpointContents ReadCheckpoint(const std::string& path, CheckpointParts parts) {
  const std::string state_path = (fs::path(path) / kStateFile).string();
  TORCH_CHECK(fs::is_directory(path), path, ": not a checkpoint folder (it ", fs::exists(path) ? "is a file" : "does not exist",
              ")");
  const nlohmann::json state = ReadJson(state_path);
  CheckpointContents c;
  try {
    TORCH_CHECK(state.at("format").get<std::string>() == "ps_train checkpoint", state_path, ": not a ps_train checkpoint");
    const int version = state.at("format_version").get<int>();
    TORCH_CHECK(version == kCheckpointFormatVersion, state_path, ": format version ", version, "; this ps_train reads ",
                kCheckpointFormatVersion);
    c.step = state.at("step").get<int64_t>();
    c.consumed_samples = state.at("consumed_samples").get<int64_t>();
    c.tokens_seen = state.at("tokens_seen").get<int64_t>();
    c.min_scale_skips = state.value("min_scale_skips", int64_t{0});
    c.engine.adam_steps = state.at("adam_steps").get<std::map<std::string, int64_t>>();
    c.engine.extra = state.at("engine");
    c.fingerprint = state.at("fingerprint");
    c.config_yaml = state.at("config").get<std::string>();
    c.version = state.at("version").get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    TORCH_CHECK(false, state_path, ": malformed (", e.what(), ")");
  }
  const auto files = state.find("files");
  TORCH_CHECK(files != state.end() && files->is_object() && !files->empty(), state_path, ": lists no files");
  for (auto it = files->begin(); it != files->end(); ++it) {
    const std::string file = (fs::path(path) / it.key()).string();
    TORCH_CHECK(it.key().find('/') == std::string::npos, state_path, ": file name '", it.key(), "' has a '/'");
    TORCH_CHECK(fs::is_regular_file(file), file, ": missing (listed in ", state_path, ")");
    if (parts == CheckpointParts::kParamsOnly && (StartsWith(it.key(), "optimizer") || StartsWith(it.key(), "rng"))) {
      continue;
    }
    int64_t expected_bytes = 0;
    std::string expected_sha;
    try {
      expected_bytes = it.value().at("bytes").get<int64_t>();
      expected_sha = it.value().at("sha256").get<std::string>();
    } catch (const nlohmann::json::exception& e) {
      TORCH_CHECK(false, state_path, ": the entry of ", it.key(), " is malformed (", e.what(), ")");
    }
    std::vector<char> contents;  // read once: hashed, then parsed
    try {
      contents = ReadWholeFile(file);
    } catch (const std::runtime_error& e) {
      TORCH_CHECK(false, e.what());  // a read error: reported like any other bad file
    }
    const int64_t bytes = static_cast<int64_t>(contents.size());
    Sha256 hash;
    hash.Update(contents.data(), contents.size());
    const std::string sha = hash.HexDigest();
    TORCH_CHECK(bytes == expected_bytes, file, ": ", bytes, " bytes, ", state_path, " says ", expected_bytes,
                " (truncated or replaced)");
    TORCH_CHECK(sha == expected_sha, file, ": SHA-256 ", sha, " does not match ", state_path, " (the file is corrupt)");
    for (auto& [name, tensor] : models::ParseSafetensors(file, contents)) {
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
      }
      TORCH_CHECK(target->emplace(key, tensor).second, file, ": tensor '", name, "' is also in another file");
    }
  }
  // For error messages: the file, or the pattern of the shards of a multi-rank save.
  const bool sharded = state.value("saved_by_ranks", 1) > 1;
  c.engine.params_file = (fs::path(path) / (sharded ? "model.rank*.safetensors" : "model.safetensors")).string();
  c.engine.optimizer_file =
      (fs::path(path) / (sharded ? "optimizer.rank*.safetensors" : "optimizer.safetensors")).string();
  return c;
}

std::vector<std::string> ListCheckpoints(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return {};
  static const std::regex kName("step_([0-9]{1,18})");
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::smatch m;
    const std::string name = entry.path().filename().string();
    if (!std::regex_match(name, m, kName) || !fs::exists(entry.path() / kStateFile)) continue;
    found.emplace_back(std::stoll(m[1].str()), entry.path().string());
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(std::move(f.second));
  return out;
}

std::vector<std::string> PruneCheckpoints(const std::string& dir, int64_t keep, const std::string& written) {
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
  const auto complete = ListCheckpoints(dir);
  for (size_t i = static_cast<size_t>(std::max<int64_t>(keep, 1)); i < complete.size(); ++i) {
    if (complete[i] == written) continue;  // never the checkpoint just written
    fs::remove_all(complete[i], ec);
    if (ec) throw std::runtime_error(complete[i] + ": could not delete (" + ec.message() + ")");
    deleted.push_back(complete[i]);
  }
  return deleted;
}

}  // namespace ps::trainer
