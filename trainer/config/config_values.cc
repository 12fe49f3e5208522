// config_loader.h's functions of a loaded Config: its YAML text and derived values.
#include <algorithm>
#include <string>
#include <thread>

#include "trainer/config/config_loader.h"
#include "trainer/config/config_schema.h"

namespace ps::trainer {

std::string ConfigToYaml(const Config& config) {
  std::string out;
  std::string section;
  for (const auto& f : BuildConfigSchema()) {
    const size_t dot = f.key.find('.');
    if (dot == std::string::npos) {
      out += f.key + ": " + f.get(config) + "\n";
      continue;
    }
    const std::string s = f.key.substr(0, dot);
    if (s != section) {
      out += s + ":\n";
      section = s;
    }
    out += "  " + f.key.substr(dot + 1) + ": " + f.get(config) + "\n";
  }
  return out;
}

int CpuThreads(const RunConfig& run) {
  return run.threads > 0 ? static_cast<int>(run.threads) : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

int64_t GradAccumSteps(const TrainConfig& train, int64_t world_size) {
  const int64_t per_step = train.micro_batch_size * world_size;
  if (train.global_batch_size % per_step != 0) {
    throw ConfigError("train.global_batch_size " + std::to_string(train.global_batch_size) +
                      " is not divisible by train.micro_batch_size " + std::to_string(train.micro_batch_size) +
                      " x ranks " + std::to_string(world_size) + " = " + std::to_string(per_step));
  }
  return train.global_batch_size / per_step;
}

bool VerticalAccumulation(const TrainConfig& train, int64_t world_size) {
  return train.accumulation_schedule == AccumulationSchedule::kVertical && GradAccumSteps(train, world_size) > 1;
}

}  // namespace ps::trainer
