#include "optim/loss_scaler.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>
#include <stdexcept>

namespace ps::optim {

LossScaler::LossScaler(const PrecisionConfig& config) : config_(config) {
  if (config.dtype != Dtype::kFp16) {
    mode_ = Mode::kOff;
    return;
  }
  if (config.loss_scale < 0) throw std::invalid_argument("precision.loss_scale must be >= 0 (0 = dynamic)");
  if (config.loss_scale > 0) {
    mode_ = Mode::kStatic;
    state_.scale = config.loss_scale;
    return;
  }
  if (config.initial_scale_power < 0 || config.initial_scale_power > 64) {
    throw std::invalid_argument("precision.initial_scale_power must be in [0, 64]");
  }
  if (config.loss_scale_window < 1) throw std::invalid_argument("precision.loss_scale_window must be >= 1");
  if (config.hysteresis < 1) throw std::invalid_argument("precision.hysteresis must be >= 1");
  if (!(config.min_loss_scale > 0)) throw std::invalid_argument("precision.min_loss_scale must be > 0");
  mode_ = Mode::kDynamic;
  state_.scale = std::ldexp(1.0, static_cast<int>(config.initial_scale_power));
  state_.hysteresis_left = config.hysteresis;
}

bool LossScaler::Update(bool overflow) {
  if (mode_ == Mode::kOff) return false;
  if (overflow) ++state_.overflows;
  if (mode_ == Mode::kDynamic) {
    if (overflow) {
      if (state_.hysteresis_left <= 1) {
        state_.scale = std::max(state_.scale / 2.0, config_.min_loss_scale);
      } else {
        --state_.hysteresis_left;
      }
      state_.last_overflow_iteration = state_.iteration;
    } else {
      if (config_.consecutive_hysteresis) state_.hysteresis_left = config_.hysteresis;
      if ((state_.iteration - state_.last_overflow_iteration) % config_.loss_scale_window == 0) {
        state_.hysteresis_left = config_.hysteresis;
        state_.scale *= 2.0;
      }
    }
  }
  ++state_.iteration;
  return overflow;
}

std::string LossScaler::Serialize(const State& s) {
  std::ostringstream out;
  out.precision(17);
  out << "scale=" << s.scale << " iteration=" << s.iteration << " last_overflow_iteration=" << s.last_overflow_iteration
      << " hysteresis_left=" << s.hysteresis_left << " overflows=" << s.overflows;
  return out.str();
}

LossScaler::State LossScaler::Parse(const std::string& text) {
  std::map<std::string, std::string> fields;
  std::istringstream in(text);
  std::string token;
  while (in >> token) {
    const auto eq = token.find('=');
    if (eq == std::string::npos) throw std::invalid_argument("loss scaler state: '" + token + "' is not key=value");
    fields[token.substr(0, eq)] = token.substr(eq + 1);
  }
  auto take = [&](const char* key) -> const std::string& {
    const auto it = fields.find(key);
    if (it == fields.end()) throw std::invalid_argument(std::string("loss scaler state: missing '") + key + "'");
    return it->second;
  };
  auto integer = [&](const char* key) {
    const std::string& v = take(key);
    size_t used = 0;
    int64_t out = 0;
    try {
      out = std::stoll(v, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != v.size() || v.empty()) throw std::invalid_argument(std::string("loss scaler state: bad '") + key + "'");
    return out;
  };
  State s;
  const std::string& scale = take("scale");
  size_t used = 0;
  try {
    s.scale = std::stod(scale, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != scale.size() || !(s.scale > 0) || !std::isfinite(s.scale)) {
    throw std::invalid_argument("loss scaler state: bad 'scale'");
  }
  s.iteration = integer("iteration");
  s.last_overflow_iteration = integer("last_overflow_iteration");
  s.hysteresis_left = integer("hysteresis_left");
  s.overflows = integer("overflows");
  if (fields.size() != 5) throw std::invalid_argument("loss scaler state: unknown fields in '" + text + "'");
  return s;
}

}  // namespace ps::optim
