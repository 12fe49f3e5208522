// The config loader's steps after every key is applied (config_loader.cc): resolving
// what the keys leave open, then validating the whole. Internal to //trainer:config.
#pragma once

#include <map>
#include <string>

#include "trainer/config/config.h"

namespace ps::trainer {

// Where each native key was set ("file:line:col" or "--set k=v"), for messages.
struct KeyPlaces {
  std::map<std::string, std::string> set_at;
  std::string source = "config";  // the document being read
  // Where `key` was set, or "config" when it was not.
  std::string At(const std::string& key) const;
};

// model.type llama: the preset's, then model.init_from's keys (llama_keys.h). Otherwise
// model.preset's shape, BERT's own defaults where unset, and model.init_from's
// config.json (keys set must agree with it; unset ones take its values). Reads files.
void ResolveModel(Config& config, KeyPlaces& places);
// data.format: synthetic takes no path; auto is inferred from data.train_path (and
// recorded in places as inferred) and must agree with data.valid_path's. Reads the
// heads of the data files.
void ResolveDataFormat(Config& config, KeyPlaces& places);
// Every check of a resolved Config that needs no world size (Train() checks those),
// the output folders included (read, never created). Throws ConfigError naming the key's place.
void ValidateConfig(const Config& config, const KeyPlaces& places);

}  // namespace ps::trainer
