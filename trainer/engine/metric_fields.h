// MetricFields: the named figures an engine reports for a logged step (chunk counters,
// Adam timings, bytes moved), in the order added. Plain data: the logger
// (trainer/logging/step_logger.h) writes them into metrics.jsonl and TensorBoard, so an
// engine needs no output format. Integers stay integers (written without a decimal
// point); reals are written in their shortest exact form.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace ps::trainer {

class MetricFields {
 public:
  using Value = std::variant<int64_t, double>;

  MetricFields& Add(std::string key, int64_t value) {
    fields_.emplace_back(std::move(key), value);
    return *this;
  }
  MetricFields& Add(std::string key, double value) {
    fields_.emplace_back(std::move(key), value);
    return *this;
  }
  const std::vector<std::pair<std::string, Value>>& fields() const { return fields_; }

 private:
  std::vector<std::pair<std::string, Value>> fields_;
};

}  // namespace ps::trainer
