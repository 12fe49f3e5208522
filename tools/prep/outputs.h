// Where ps_prep's documents go: ValidSplit chooses the validation documents (a seeded,
// exact-size random subset, in input order) and a SplitWriter per split writes their ids
// as Megatron .bin/.idx or as an llm.c shard; --format sft adds a .mask beside the
// .bin/.idx: one uint8 per token, 1 = trained on (docs/data.md). Main thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "tools/prep/options.h"

namespace ps::prep {

// The number of validation documents among `num_docs`: --valid-docs (at most all but
// one), else --valid-fraction rounded, at least 1 when > 0 and at most all but one.
int64_t ValidCount(const Options& opt, int64_t num_docs);

// Algorithm S (Knuth TAOCP 3.4.2): each document is chosen with probability
// still-needed / still-left, so exactly ValidCount(opt, num_docs) of the first
// `num_docs` documents are chosen, the same ones for the same seed.
class ValidSplit {
 public:
  ValidSplit(const Options& opt, int64_t num_docs)
      : valid_left_(ValidCount(opt, num_docs)), docs_left_(num_docs), rng_(opt.seed) {}

  // Whether the next document (of those counted) goes to the validation split.
  bool Next() {
    if (docs_left_ <= 0) return false;
    const bool valid = static_cast<int64_t>(rng_() % static_cast<uint64_t>(docs_left_)) < valid_left_;
    valid_left_ -= valid;
    --docs_left_;
    return valid;
  }

 private:
  int64_t valid_left_, docs_left_;
  std::mt19937_64 rng_;
};

// One split's output files.
class SplitWriter {
 public:
  virtual ~SplitWriter() = default;
  // `mask`: [ids.size()] for --format sft, else empty.
  virtual void AddDocument(const std::vector<int32_t>& ids, const std::vector<uint8_t>& mask) = 0;
  // Completes the files under their ".tmp" names; none is in place yet (destroyed
  // without Commit, the writer removes them).
  virtual void Close() = 0;
  // Renames the closed files into place. A dataset's writers are all closed before any is
  // committed, so a failed write (a full disk) leaves the files already there whole.
  virtual void Commit() = 0;
  virtual int64_t num_documents() const = 0;
  virtual int64_t num_tokens() const = 0;
  virtual std::vector<std::string> files() const = 0;
  virtual std::string dtype() const = 0;  // of the ids on disk ("uint16", ...)
};

// Every file a run of `opt` may write, temporary ones included ("<file>.tmp"): an input
// must be none of them.
std::vector<std::string> OutputPaths(const Options& opt);

// The writer of split `split` ("train", "valid"): files <output_prefix>_<split>.*, in
// opt.format, with ids as narrow as `vocab_size` allows.
std::unique_ptr<SplitWriter> MakeWriter(const Options& opt, const std::string& split, int64_t vocab_size);

}  // namespace ps::prep
