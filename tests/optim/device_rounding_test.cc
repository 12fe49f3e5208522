// StochasticRoundInto (optim/device_rounding.h), the device update's bf16 store for
// weights without an fp32 master, against the CPU kernels' specification
// FloatToBf16Stochastic(value, SrHash(index, seed)): bitwise on random values of every
// magnitude and sign, zeros, infinities and NaN, at indices that wrap past 2^32, across
// the function's internal steps.
#include <ATen/ATen.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "optim/cpu_adam.h"
#include "optim/device_rounding.h"
#include "tests/catch.h"

namespace ps::optim {
namespace {

// Random fp32 values over many binades, with zeros, infinities, NaN and extremes.
at::Tensor TestValues(int64_t n) {
  at::Tensor values = at::randn({n}) * at::exp(at::randn({n}) * 8);  // magnitudes over many binades
  const float specials[] = {0.0f, -0.0f, std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
                            std::numeric_limits<float>::denorm_min(), 1.0f, -3.0f};
  for (int k = 0; k < 10; ++k) values[k * 997] = specials[k];
  return values;
}

// StochasticRoundInto on `device` against the specification, at first indices that
// wrap past 2^32 too.
void CheckBitwise(const at::Tensor& values, at::Device device) {
  for (const auto& [first, seed] : {std::pair<int64_t, uint32_t>{0, 0u}, {123456, 0xdeadbeefu},
                                    {(int64_t{1} << 32) - 1000, 7u}}) {  // the last wraps past 2^32
    INFO("device " << device << ", first index " << first << ", seed " << seed);
    at::Tensor out = at::empty({values.numel()}, at::TensorOptions().dtype(at::kBFloat16).device(device));
    StochasticRoundInto(values.to(device), out, first, seed);
    out = out.cpu();
    const float* v = values.data_ptr<float>();
    const uint16_t* got = reinterpret_cast<const uint16_t*>(out.data_ptr());
    int64_t wrong = 0;
    for (int64_t i = 0; i < values.numel(); ++i) {
      const uint16_t want = FloatToBf16Stochastic(v[i], SrHash(static_cast<uint32_t>(first + i), seed));
      wrong += got[i] != want ? 1 : 0;
    }
    CHECK(wrong == 0);
  }
}

TEST_CASE("stochastic rounding in LibTorch ops equals the kernels' bit for bit", "[sr][device]") {
  const int64_t n = kRoundingStepNumel + 4099;  // two steps, the second partial
  const at::Tensor values = TestValues(n);
  CheckBitwise(values, at::kCPU);
  at::Tensor half = at::empty({n}, at::kHalf);
  CHECK_THROWS_WITH(StochasticRoundInto(values, half, 0, 0), Catch::Contains("a bf16 output"));
}

// A --config=cuda build on a GPU (the machine of tools/gpu_checks.sh): the CUDA kernel.
TEST_CASE("stochastic rounding on a CUDA device equals the kernels' bit for bit", "[sr][device][cuda]") {
  if (!at::hasCUDA()) {  // nothing to compare on a machine without a GPU: said, not passed silently
    WARN("no CUDA device: this case checked nothing (tools/gpu_checks.sh runs it on a GPU)");
    return;
  }
  CheckBitwise(TestValues(16 * kRoundingStepNumel + 4099), at::Device(at::kCUDA, 0));
}

}  // namespace
}  // namespace ps::optim
