// The run's folders and identity: where checkpoints go, what a checkpoint must match to
// be resumed (the fingerprint), and the output-folder rule that keeps one run from
// silently replacing another's files. Training thread, before the first step.
#pragma once

#include <nlohmann/json.hpp>
#include <map>
#include <string>
#include <vector>

#include "trainer/config/config.h"
#include "trainer/io/checkpoint.h"

namespace ps::trainer {

// checkpoint.dir, or <run.output_dir>/checkpoints.
std::string CheckpointDir(const Config& config);

// What must be equal for a checkpoint to resume this config: the model shape,
// vocabulary, precision and sequence length; for chat data (data.format sft) the format
// and data.packing, which decide what data.consumed_samples counts.
nlohmann::json RunFingerprint(const Config& config);

// This run as its checkpoints name it: run.name, run.output_dir (absolute, canonical),
// RunFingerprint.
RunIdentity IdentityOf(const Config& config);

// Throws ConfigError naming `checkpoint` and every fingerprint key that differs.
void CheckFingerprint(const nlohmann::json& saved, const nlohmann::json& now, const std::string& checkpoint);

// A YAML mapping's leaves as dotted keys -> values (flow-style YAML text); {} when
// `yaml` does not parse.
std::map<std::string, std::string> FlattenYaml(const std::string& yaml);

// Logs (info) every resolved-config key whose value differs from the saving run's.
void LogConfigChanges(const std::string& saved_yaml, const std::string& now_yaml);

// Before anything is written: when run.output_dir holds a run's files (metrics.jsonl
// with content, or checkpoints) and this run does not resume from a checkpoint of its
// own checkpoint.dir (`resuming_here`):
// - the same run (config.resolved.yaml equal to this config: an attempt killed before
//   its first checkpoint) restarts from step 0, appending to its metrics;
// - with run.overwrite, the files are deleted: metrics, and the checkpoints this run
//   wrote (WrittenBy, any fingerprint; in a checkpoint.dir inside the output folder,
//   all of them). A checkpoint.dir elsewhere that holds checkpoints of other runs (or
//   ones that do not verify) is a ConfigError, and nothing is deleted;
// - otherwise it is another run: throws ConfigError saying what to do (`unusable`:
//   checkpoints that failed verification, named as such in the message).
// Returns whether metrics.jsonl is continued (appended to) rather than started anew.
bool ClaimOutputDir(const Config& config, bool resuming_here, int unusable);

// Whether `inner` is the folder `outer` or lies inside it (paths made absolute, `.`,
// `..` and the symlinks of their existing parts resolved).
bool FolderIsWithin(const std::string& inner, const std::string& outer);

// Whether checkpoint folder `path` lies in `dir`.
bool CheckpointIsIn(const std::string& path, const std::string& dir);

// Before this run saves into `dir`, resuming `step` (0 when starting afresh): under
// checkpoint.resume: auto, the checkpoints that failed verification (`unusable`, all
// newer than the resumed one) are renamed step_N.unusable (step_N.unusable.2, ... when
// taken; kept, never read or pruned),
// so this run's saves of those steps replace nothing. After an explicit resume path,
// checkpoints in `dir` newer than `step` are a later timeline: throws ConfigError.
void SetAsideNewerCheckpoints(const std::string& dir, int64_t step, bool resume_auto,
                              const std::vector<std::string>& unusable);

// Folders of `dir` named as this run's checkpoint of a step after `step` (step_N, N >
// step) but without a state.json (a half-finished copy, not written by ps_train, which
// renames a folder into place only when complete): ListCheckpoints ignores them, and this
// run could not save at step N. Throws ConfigError naming them.
void RefuseIncompleteCheckpointFolders(const std::string& dir, int64_t step);

// A metrics.jsonl cut mid-line by a kill: drops the partial last line, so appended
// lines start on their own line.
void DropPartialLastLine(const std::string& path);

// Removes the TensorBoard event files of earlier runs in `dir` (a run that starts afresh
// starts a fresh tb/, as it does metrics.jsonl; a continued run adds a file beside its
// earlier ones, and TensorBoard drops their steps after the resumed one when it reads the
// new file's).
void RemoveEventFiles(const std::string& dir);

}  // namespace ps::trainer
