// BPE merging: the symbols (token ids) of one word merged pair by pair, the adjacent pair
// of lowest rank first and the leftmost among equals (HF's order), by a PairMap of
// (left, right) -> (rank, merged id). Stateless; any thread.
#pragma once

#include <cstdint>
#include <vector>

#include "tokenizer/flat_maps.h"

namespace ps::tokenizer {

// Merges `symbols` in place until no adjacent pair has a merge.
void MergeSymbols(const PairMap& merges, std::vector<int32_t>* symbols);

}  // namespace ps::tokenizer
