// Checkpoint folders: the on-disk format of a saved training state, written atomically
// and verified on load. A checkpoint is <dir>/step_<N>/ holding
//   model.safetensors      fp32 parameters by name ("h.3.mlp.c_fc.weight"; tied ones once)
//   optimizer.safetensors  "optimizer.exp_avg.<name>", "optimizer.exp_avg_sq.<name>"
//   rng.safetensors        random generator states ("rng.cpu", "rng.cuda")
//   state.json             scalar state, fingerprint, resolved config, version, and the
//                          size and SHA-256 of every file above
// plus <dir>/latest naming the newest. A ZeRO run of p ranks writes model.rank<R> and
// optimizer.rank<R>.safetensors instead, each with the parameters rank R owns (every
// parameter in exactly one). Tensors are stored by parameter name, never by chunk, so
// any chunk layout, plain runs and any rank count read the same files: a reader takes
// the union of the listed files by name (a name in two files is an error).
// Writing: into <dir>/.tmp_step_<N>/, every file fsynced, then renamed to step_<N>/, the
// folder fsynced, then latest replaced atomically. A crash leaves the old checkpoint or
// the new one complete; leftover .tmp_ folders are never read.
// The manifest (state.json) is trusted only when it verifies: manifest.sha256 holds its
// SHA-256 (sha256sum's format), and every field is range-checked and cross-checked
// (docs/checkpoints.md, "The manifest"); a folder whose name is step_N must hold step N.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/safetensors.h"
#include "trainer/config/config_loader.h"
#include "trainer/engine/engine.h"

namespace ps::trainer {

// 2: manifest.sha256, run_name, run_output_dir and samples in state.json. Format 1 is still read (its
// manifest unhashed: range checks only, the run's name taken from its config).
constexpr int kCheckpointFormatVersion = 2;

// A checkpoint that fails verification (a file, the manifest's hash, a field): bad input,
// like a bad config (ps_train exits 2). The message names the file and the field.
class CheckpointError : public ConfigError {
 public:
  using ConfigError::ConfigError;
};

// How the sampler's position grew in the run segment that saved the checkpoint:
// consumed_samples = consumed_at_start + (step - start_step) * global_batch_size. A
// resume with another global batch size starts a new segment at the resumed step.
struct SampleSchedule {
  int64_t start_step = 0;
  int64_t consumed_at_start = 0;
  int64_t global_batch_size = 0;  // 0: not recorded (format 1)
};

struct CheckpointContents {
  int64_t step = 0;              // optimizer steps done
  int64_t consumed_samples = 0;  // the data sampler's position
  int64_t tokens_seen = 0;
  int64_t min_scale_skips = 0;   // fp16: consecutive steps skipped at the minimum loss scale
  EngineState engine;
  models::TensorMap rng;         // SaveRngStates
  SampleSchedule samples;
  // Which run wrote it (RunIdentity): run.name, its run.output_dir (absolute; "" in
  // format 1) and what must match on resume (model shape, dtype, vocabulary, sequence
  // length). A run resumes only its own checkpoints unless checkpoint.resume names one;
  // it prunes and replaces only its own.
  std::string run_name;
  std::string run_output_dir;
  nlohmann::json fingerprint = nlohmann::json::object();
  std::string config_yaml;       // the resolved config of the saving run
  std::string version;           // ps_train version that wrote it
};

// A run, as checkpoints name it: run.name, run.output_dir (absolute, canonical) and the
// fingerprint.
struct RunIdentity {
  std::string name;
  std::string output_dir;
  nlohmann::json fingerprint = nlohmann::json::object();
};

struct CheckpointWriteReport {
  std::string path;    // the step_<N> folder
  int64_t bytes = 0;   // all files
  double seconds = 0;  // writing, fsync and rename
};

// Writes `contents` (tensors may live on any device; one at a time is copied to the
// host) as <dir>/step_<step>/. A folder of that step already there is replaced once
// the new one is complete.
// Throws std::runtime_error naming the file on any failed write; the temporary folder
// is removed and nothing complete is touched.
CheckpointWriteReport WriteCheckpoint(const std::string& dir, const CheckpointContents& contents);

// A save in steps, for several ranks writing one checkpoint (docs/checkpoints.md,
// "Sharded saves"): rank 0 opens the temporary folder, every rank writes its share into
// it, rank 0 commits it once every share is complete. WriteCheckpoint is the three
// steps with one rank.
//
// <dir>/.tmp_step_<step>/ (the folder a save in progress writes into).
std::string TmpCheckpointFolder(const std::string& dir, int64_t step);
// Creates <dir> if needed and an empty temporary folder of `step`; returns its path.
std::string OpenCheckpointFolder(const std::string& dir, int64_t step);
// Writes rank `rank` of `world`'s tensors of `contents` into `folder`: its model and
// optimizer files (model.safetensors with one rank, model.rank<R>.safetensors with
// several), and on rank 0 the RNG file; each fsynced. Returns their entries for
// state.json: {file: {bytes, sha256}}. Throws std::runtime_error naming the file.
nlohmann::json WriteCheckpointShard(const std::string& folder, const CheckpointContents& contents, int rank, int world);
// Writes state.json (the scalars of `contents`, listing `files`: every rank's entries),
// then renames the temporary folder to step_<N> and replaces latest. On failure the
// temporary folder is removed and nothing complete is touched.
CheckpointWriteReport CommitCheckpoint(const std::string& dir, const CheckpointContents& contents,
                                       const nlohmann::json& files, int world);
// Removes the temporary folder of `step` (a save that will not be committed).
void AbandonCheckpoint(const std::string& dir, int64_t step);

enum class CheckpointParts {
  kAll,           // everything a resume needs
  kParamsOnly,    // parameters and scalar state; optimizer and RNG files are not read
  kManifestOnly,  // state.json verified (hash and fields); no tensor file is read
};

// Reads the checkpoint folder `path`, verifying the manifest (its hash and fields),
// every listed file's presence, size and SHA-256, every tensor's header, and the
// cross-checks between them (adam_steps names the parameters, RNG states are valid);
// kParamsOnly: the files it reads; the others must still be present. Throws
// CheckpointError naming the file (and tensor or field).
CheckpointContents ReadCheckpoint(const std::string& path, CheckpointParts parts = CheckpointParts::kAll);

// The step_<N> folders of `dir` that have a state.json, newest (largest N) first. Only
// canonical names count (step_0, step_17; not step_017): the name is the step.
std::vector<std::string> ListCheckpoints(const std::string& dir);
// Folders of `dir` named like checkpoints but not canonically (step_06, step_x): never
// read, never deleted; reported so the user knows they are ignored.
std::vector<std::string> StrayCheckpointFolders(const std::string& dir);

// Whether the checkpoint at `path`, whose manifest (verified) is `manifest`, was written
// by `run`: the same run.name, and the checkpoint lies in run's output folder
// (checkpoints move with their run) or its manifest names run's output folder (a
// checkpoint.dir elsewhere, which other runs may share: two runs of the default name
// "run" in different folders are different runs). `same_fingerprint`: the fingerprints
// must match too (pruning; a resume reports a different fingerprint itself).
bool WrittenBy(const CheckpointContents& manifest, const std::string& path, const RunIdentity& run,
               bool same_fingerprint);

// Deletes all but the newest `keep` (by the step in their names) of the checkpoints of
// `dir` that `run` wrote (WrittenBy, fingerprint included; their manifests verify),
// never `written` (the one just saved), and the leftovers of interrupted saves (a
// complete .old_step_N whose replacement never landed is put back as step_N).
// Checkpoints of other runs, or whose manifest fails, are never deleted. Returns the
// folders deleted; throws std::runtime_error naming a checkpoint that cannot be deleted.
std::vector<std::string> PruneCheckpoints(const std::string& dir, int64_t keep, const std::string& written,
                                          const RunIdentity& run);

}  // namespace ps::trainer
