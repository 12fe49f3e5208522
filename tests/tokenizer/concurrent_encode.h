// A check that a Tokenizer encodes from many threads as from one: `threads` threads each
// encode every text `rounds` times, in orders offset per thread and round.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace ps::testing {

// How many of the encodes gave ids other than `expected[i]` for `texts[i]`.
inline int ConcurrentEncodeMismatches(const tokenizer::Tokenizer& tok, const std::vector<std::string>& texts,
                                      const std::vector<std::vector<int32_t>>& expected, int threads, int rounds) {
  std::vector<int> mismatches(threads, 0);
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      for (int round = 0; round < rounds; ++round) {
        for (size_t i = 0; i < texts.size(); ++i) {
          const size_t k = (i + t * 7 + round) % texts.size();
          mismatches[t] += tok.Encode(texts[k]) != expected[k];
        }
      }
    });
  }
  int total = 0;
  for (int t = 0; t < threads; ++t) {
    workers[t].join();
    total += mismatches[t];
  }
  return total;
}

}  // namespace ps::testing
