// The run's folders and identity: where checkpoints go, what a checkpoint must match to
// be resumed (the fingerprint), and the output-folder rule that keeps one run from
// silently replacing another's files. Training thread, before the first step.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "trainer/config.h"

namespace ps::trainer {

// checkpoint.dir, or <run.output_dir>/checkpoints.
std::string CheckpointDir(const Config& config);

// What must be equal for a checkpoint to resume this config: the model shape,
// vocabulary, precision and sequence length.
nlohmann::json RunFingerprint(const Config& config);

// Throws ConfigError naming `checkpoint` and every fingerprint key that differs.
void CheckFingerprint(const nlohmann::json& saved, const nlohmann::json& now, const std::string& checkpoint);

// Logs (info) every resolved-config key whose value differs from the saving run's.
void LogConfigChanges(const std::string& saved_yaml, const std::string& now_yaml);

// Before anything is written: when run.output_dir holds a run's files (metrics.jsonl
// with content, or checkpoints) and this run does not resume from a checkpoint of its
// own checkpoint.dir (`resuming_here`):
// - the same run (config.resolved.yaml equal to this config: an attempt killed before
//   its first checkpoint) restarts from step 0, appending to its metrics;
// - with run.overwrite, the files are deleted;
// - otherwise it is another run: throws ConfigError saying what to do (`unusable`:
//   checkpoints that failed verification, named as such in the message).
// Returns whether metrics.jsonl is continued (appended to) rather than started anew.
bool ClaimOutputDir(const Config& config, bool resuming_here, int unusable);

// Whether checkpoint folder `path` lies in `dir`.
bool CheckpointIsIn(const std::string& path, const std::string& dir);

// Checkpoints in `dir` newer than `step` (the resumed one, 0 when starting afresh) would
// outrank this run's own when pruning. Under checkpoint.resume: auto they are the ones
// that failed verification: renamed to step_N.unusable (kept, never read or pruned).
// After an explicit resume path they are a later timeline: throws ConfigError.
void SetAsideNewerCheckpoints(const std::string& dir, int64_t step, bool resume_auto);

// A metrics.jsonl cut mid-line by a kill: drops the partial last line, so appended
// lines start on their own line.
void DropPartialLastLine(const std::string& path);

}  // namespace ps::trainer
