// The config field table: every key declared once with its type, help text and range
// check. Parsing (config_loader), printing (resolved YAML), --config-reference and
// the README table are all derived from this list; a test freezes it.
// Also the alias table that maps PatrickStar/DeepSpeed seed keys onto native keys.
#pragma once

#include <yaml-cpp/yaml.h>

#include <functional>
#include <string>
#include <vector>

#include "trainer/config/config.h"

namespace ps::trainer {

struct FieldSpec {
  std::string key;        // dotted path, e.g. "optimizer.lr"
  std::string type_name;  // for messages and docs: "int", "float", "one of a|b", ...
  std::string help;
  // Converts and checks `node`, then stores it. Throws std::invalid_argument with a
  // message that names the expected type or range (the caller adds key and location).
  std::function<void(Config&, const YAML::Node&)> set;
  // The field's current value as a YAML flow scalar/sequence.
  std::function<std::string(const Config&)> get;
};

// A key accepted for compatibility with PatrickStar/DeepSpeed configs.
struct AliasSpec {
  std::string key;     // e.g. "optimizer.params.lr", "fp16.enabled"
  std::string target;  // native key it sets
  std::string note;    // what it means, for the docs
  // Optional value rewrite (e.g. fp16.enabled: true -> precision.dtype: fp16);
  // returning an empty node means "set nothing".
  std::function<YAML::Node(const YAML::Node&)> transform;
};

std::vector<FieldSpec> BuildConfigSchema();
std::vector<AliasSpec> BuildConfigAliases();

}  // namespace ps::trainer
