// The legal-transition table, every pair, and the error for an illegal one.
#include "chunkmem/tensor_state.h"
#include "tests/catch.h"

namespace ps::chunkmem {
namespace {

TEST_CASE("every transition matches the documented table", "[state]") {
  using S = TensorState;
  const S all[] = {S::kFree, S::kCompute, S::kHold, S::kHoldAfterFwd, S::kHoldAfterBwd};
  // Rows: from; columns: to (kFree, kCompute, kHold, kHoldAfterFwd, kHoldAfterBwd).
  const bool legal[5][5] = {
      {false, true, true, false, false},   // kFree
      {false, true, true, true, true},     // kCompute
      {true, true, false, false, false},   // kHold
      {true, true, true, false, false},    // kHoldAfterFwd
      {true, true, true, false, false},    // kHoldAfterBwd
  };
  for (int f = 0; f < 5; ++f) {
    for (int t = 0; t < 5; ++t) {
      INFO(ToString(all[f]) << " -> " << ToString(all[t]));
      CHECK(IsLegalTransition(all[f], all[t]) == legal[f][t]);
      if (legal[f][t]) {
        CHECK_NOTHROW(CheckTransition(all[f], all[t], "w"));
      } else {
        CHECK_THROWS(CheckTransition(all[f], all[t], "w"));
      }
    }
  }
}

TEST_CASE("an illegal transition names the tensor and both states", "[state]") {
  CHECK_THROWS_WITH(CheckTransition(TensorState::kFree, TensorState::kHoldAfterBwd, "h.0.mlp.c_fc.weight"),
                    Catch::Contains("illegal state transition of 'h.0.mlp.c_fc.weight': kFree -> kHoldAfterBwd"));
}

}  // namespace
}  // namespace ps::chunkmem
