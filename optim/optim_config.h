// Typed configs owned by optim/: optimizer, LR schedule and precision/loss scaling.
// Plain data; trainer/ parses YAML into them. Defaults are DeepSpeed's where a key
// exists there (see docs/config_reference.md for the generated table).
#pragma once

#include <cstdint>
#include <vector>

namespace ps::optim {

enum class OptimizerType { kAdam, kAdamW };  // kAdam: L2 in the gradient; kAdamW: decoupled
// kWsd: warmup-stable-decay (constant at lr, then a linear decay over the last decay_steps).
enum class ScheduleType { kConstant, kLinear, kCosine, kWsd };
enum class Dtype { kFp32, kFp16, kBf16 };
// Which CPU Adam kernel variant runs (auto: the best this CPU supports).
enum class CpuAdamChoice { kAuto, kScalar, kAvx2, kAvx512 };
// How the chunk runtime stores Adam's m and v (the arithmetic is fp32 either way;
// optim/cpu_adam.h): fp32, bf16 (rounded to nearest even at every store), or int8
// (block-wise dynamic 8-bit codes with an fp32 scale per 256 elements; optim/block_quant.h).
enum class StateDtype { kFp32, kBf16, kInt8 };
// Whether the chunk runtime keeps an fp32 master of bf16 weights (fp32) or updates the
// bf16 weights themselves with stochastic rounding (none; docs/optim.md).
enum class MasterWeights { kFp32, kNone };

// The largest gradient norm (after clipping, loss scale removed) an optimizer step
// applies; a step above it counts as an overflow (skipped; the trainer stops unless a
// loss scaler tolerates it). Any gradient element that large would overflow Adam's fp32
// second moment (g^2 > FLT_MAX from |g| ~ 1.84e19: fp32 moments freeze at inf, int8
// blocks lose their scale); 1e19 leaves a margin for the kernels' fp32 rounding.
constexpr double kMaxUpdateGradNorm = 1e19;

struct OptimizerConfig {
  OptimizerType type = OptimizerType::kAdamW;
  double lr = 6e-4;               // peak learning rate
  std::vector<double> betas = {0.9, 0.95};
  double eps = 1e-8;
  double weight_decay = 0.1;      // matrices only: never biases or norm weights
  bool hybrid_adam = true;        // PatrickStar use_hybrid_adam: GPU Adam for resident chunks
  StateDtype state_dtype = StateDtype::kFp32;  // chunk runtime: m and v storage (docs/optim.md)
  MasterWeights master_weights = MasterWeights::kFp32;  // chunk runtime, bf16: fp32 master or none
  CpuAdamChoice cpu_adam = CpuAdamChoice::kAuto;  // CPU kernel variant (forced for tests/benchmarks)
  // Chunk runtime: host chunks updated ahead in backward, speculatively (HybridAdam::
  // Speculate; docs/optim.md); each costs a backup of 14 bytes per chunk element. 0 = off.
  int64_t speculation_slots = 0;
  int64_t speculation_backoff_steps = 20;  // steps without speculation after one rolled back
  // Chunk runtime: the host Adam threads pinned one per physical core, the GPU's NUMA
  // node first (optim/cpu_topology.h); their count capped at the cores this process may use.
  bool pin_cpu_threads = false;
};

struct LrScheduleConfig {
  ScheduleType type = ScheduleType::kCosine;
  int64_t warmup_steps = 0;       // linear ramp from 0 to lr over these steps
  int64_t decay_steps = 0;        // steps of decay after warm-up; 0 = until train.max_steps
                                  // (wsd: length of the final decay; 0 = the last 10% of steps)
  double min_lr = 0.0;            // floor reached at the end of decay
};

struct PrecisionConfig {
  Dtype dtype = Dtype::kFp32;     // compute dtype; masters are always fp32
  double loss_scale = 0.0;        // fp16 only. 0 = dynamic (DeepSpeed), > 0 = static
  int64_t initial_scale_power = 16;  // dynamic: initial scale 2^power
  int64_t loss_scale_window = 1000;  // dynamic: clean steps before the scale doubles
  int64_t hysteresis = 2;            // dynamic: overflows tolerated before it halves
  bool consecutive_hysteresis = false;  // dynamic: refill the hysteresis at every clean step
  double min_loss_scale = 1.0;
  // Dynamic: a run whose last this-many steps all overflowed at min_loss_scale has
  // diverged (it can only skip from here on); it stops with an error. 0 = never stop.
  int64_t max_skips_at_min_scale = 20;
};

const char* ToString(OptimizerType t);
const char* ToString(ScheduleType t);
const char* ToString(Dtype t);
const char* ToString(StateDtype t);
const char* ToString(MasterWeights t);

}  // namespace ps::optim
