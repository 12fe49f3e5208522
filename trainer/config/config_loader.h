// Loads a Config from YAML: the only place YAML is parsed. Strict: unknown keys,
// wrong types, out-of-range values, duplicate keys, missing ${VARS} and keys set
// twice (alias + native) are ConfigErrors naming the key path and file:line:col
// (1-based), and so is a second YAML document ('---') in the text. `--set a.b=value`
// overrides are applied after the file; each value is one YAML node (a scalar, a flow
// sequence `optimizer.betas=[0.9,0.95]` or map); a document marker, several documents
// or a null value are errors. ${VAR:-default} defaults may nest references.
// Reads the file system for what the config names: data.format, when not given, is
// inferred from data.train_path (no format and no path is an error); run.output_dir
// must be non-empty, and neither it nor checkpoint.dir may be or lie under a file.
#pragma once

#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "trainer/config/config.h"

namespace ps::trainer {

class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Looks up an environment variable for ${VAR} interpolation.
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;
EnvLookup ProcessEnv();

// A directory, or a file without keys (empty, only comments, /dev/null), is a
// ConfigError naming the path.
Config LoadConfigFile(const std::string& path, const std::vector<std::string>& overrides,
                      const EnvLookup& env);
// `source_name` stands for the file name in messages. Empty text loads the defaults
// (plus the overrides).
Config LoadConfigText(const std::string& yaml_text, const std::string& source_name,
                      const std::vector<std::string>& overrides, const EnvLookup& env);

// The resolved config as YAML (every key, in schema order); loads back to the same Config.
std::string ConfigToYaml(const Config& config);

// Markdown tables of every key (type, default, meaning) and of the accepted aliases.
std::string ConfigReferenceMarkdown();

// Micro-batches per optimizer step; throws ConfigError spelling out the arithmetic
// when global_batch_size is not a multiple of micro_batch_size x world_size.
int64_t GradAccumSteps(const TrainConfig& train, int64_t world_size);

// Whether a step runs its micro-batches block-major (train.accumulation_schedule:
// vertical with more than one micro-batch per step; with one both orders are the same).
bool VerticalAccumulation(const TrainConfig& train, int64_t world_size);

// CPU threads of a run: run.threads, or every hardware thread when it is 0.
int CpuThreads(const RunConfig& run);

}  // namespace ps::trainer
