// TensorState: where a parameter's slot in a chunk is in its life cycle, with the one
// table of legal transitions (docs/chunkmem.md). Anything not in the table throws.
#pragma once

#include <string>

namespace ps::chunkmem {

enum class TensorState {
  // No value of the parameter in the slot yet: the state before ChunkRuntime's constructor
  // copies the parameter in (kFree -> kHold). The payload itself is already zero-filled by
  // ChunkStore::Allocate; nothing is filled on access. The runtime never returns a
  // parameter to kFree (the table's edges into it are for releasing slots, unused today).
  kFree,
  kCompute,       // the LibTorch parameter points at the slot; the chunk must stay put
  kHold,          // slot holds data; the chunk may move
  kHoldAfterFwd,  // used in this forward, released after it
  kHoldAfterBwd,  // the slot holds the gradient (or the param after its last backward use)
};

constexpr int kNumTensorStates = 5;

const char* ToString(TensorState s);
bool IsLegalTransition(TensorState from, TensorState to);

// Throws c10::Error naming `what` (a parameter) and both states when illegal.
void CheckTransition(TensorState from, TensorState to, const std::string& what);

}  // namespace ps::chunkmem
