// The ps_train version: one place, read by --version and recorded in every checkpoint.
#pragma once

namespace ps::trainer {

inline constexpr char kVersion[] = "0.2";

}  // namespace ps::trainer
