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
// with content, or checkpoints) and this run does not resume from a checkpoint:
// - the same run (config.resolved.yaml equal to this config: an attempt killed before
//   its first checkpoint) restarts from step 0, appending to its metrics;
// - with run.overwrite, the files are deleted;
// - otherwise it is another run: throws ConfigError saying what to do.
// Returns whether metrics.jsonl is continued (appended to) rather than started anew.
bool ClaimOutputDir(const Config& config, bool resuming);

// A metrics.jsonl cut mid-line by a kill: drops the partial last line, so appended
// lines start on their own line.
void DropPartialLastLine(const std::string& path);

}  // namespace ps::trainer
