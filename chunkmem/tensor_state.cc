#include "chunkmem/tensor_state.h"

#include <c10/util/Exception.h>

namespace ps::chunkmem {

const char* ToString(TensorState s) {
  switch (s) {
    case TensorState::kFree: return "kFree";
    case TensorState::kCompute: return "kCompute";
    case TensorState::kHold: return "kHold";
    case TensorState::kHoldAfterFwd: return "kHoldAfterFwd";
    case TensorState::kHoldAfterBwd: return "kHoldAfterBwd";
  }
  return "?";
}

bool IsLegalTransition(TensorState from, TensorState to) {
  using S = TensorState;
  switch (from) {
    case S::kFree:
      return to == S::kCompute || to == S::kHold;
    case S::kCompute:
      // Re-entrant access (a shared parameter used twice) is a legal no-op.
      return to != S::kFree;
    case S::kHold:
      return to == S::kFree || to == S::kCompute;
    case S::kHoldAfterFwd:
    case S::kHoldAfterBwd:
      return to == S::kFree || to == S::kCompute || to == S::kHold;
  }
  return false;
}

void CheckTransition(TensorState from, TensorState to, const std::string& what) {
  TORCH_CHECK(IsLegalTransition(from, to), "chunkmem: illegal state transition of '", what, "': ",
              ToString(from), " -> ", ToString(to));
}

}  // namespace ps::chunkmem
