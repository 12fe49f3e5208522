// AutocastScope: enables LibTorch autocast to bf16 on a device for its lifetime (bf16
// compute over fp32 weights, the plain engine's mixed precision); a no-op for other
// dtypes. Training thread only (autocast state is thread-local).
#pragma once

#include <ATen/autocast_mode.h>
#include <c10/core/Device.h>

#include "optim/optim_config.h"

namespace ps::trainer {

class AutocastScope {
 public:
  AutocastScope(at::Device device, optim::Dtype dtype) : type_(device.type()), enabled_(dtype == optim::Dtype::kBf16) {
    if (!enabled_) return;
    at::autocast::set_autocast_enabled(type_, true);
    at::autocast::set_autocast_dtype(type_, at::kBFloat16);
  }
  ~AutocastScope() {
    if (!enabled_) return;
    at::autocast::set_autocast_enabled(type_, false);
    at::autocast::clear_cache();
  }
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  at::DeviceType type_;
  bool enabled_;
};

}  // namespace ps::trainer
