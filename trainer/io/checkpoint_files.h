// The checkpoint folder's file names and tensor-name prefixes, shared by the writer
// (checkpoint.cc) and the reader (checkpoint_read.cc) of the format in checkpoint.h.
// Internal to the checkpoint library.
#pragma once

#include <cstdint>
#include <string>

namespace ps::trainer {

inline constexpr char kRngFile[] = "rng.safetensors";
inline constexpr char kStateFile[] = "state.json";
inline constexpr char kManifestHashFile[] = "manifest.sha256";
inline constexpr char kExpAvg[] = "optimizer.exp_avg.";
inline constexpr char kExpAvgSq[] = "optimizer.exp_avg_sq.";

inline bool StartsWith(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// step_<N> with N written canonically (no sign, no leading zero, at most 18 digits);
// sets *step (when not null) to N.
bool CanonicalStepName(const std::string& name, int64_t* step);

}  // namespace ps::trainer
