// One ps_prep run: reads the documents of the inputs (DocumentReader), encodes them on a
// pool of threads (EncodePool), splits them into train and valid (ValidSplit) and writes
// each split (SplitWriter) in input order. Progress and skipped inputs go to stderr; what
// the run did comes back as a PrepReport for main to print. Main thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"
#include "tools/prep/chat_setup.h"
#include "tools/prep/options.h"

namespace ps::prep {

struct SplitReport {
  std::vector<std::string> files;  // empty when the split has no document (none written)
  int64_t num_documents = 0;
  int64_t num_tokens = 0;
  std::string dtype;  // of the ids on disk
};

// --format sft: what happened to the examples (counted, not errors).
struct SftReport {
  std::string template_origin;  // where the chat template came from
  int64_t trained_tokens = 0;   // mask 1
  int64_t truncated = 0;        // cut to --max-tokens (written)
  int64_t dropped_overlong = 0;   // over --max-tokens with --overlong drop (not written)
  int64_t dropped_untrained = 0;  // no trained token (left after truncation): not written
  int64_t turns_without_eot = 0;  // assistant turns not followed by an end-of-turn token
};

struct PrepReport {
  tokenizer::TokenizerKind tokenizer_kind = tokenizer::TokenizerKind::kByteLevelBpe;
  int64_t vocab_size = 0;
  std::optional<int32_t> eot;  // the id appended after each document, if any
  int64_t input_bytes = 0;     // size of the input files
  double elapsed_s = 0;
  int64_t tokens = 0;
  int64_t bad_inputs = 0;  // skipped (--on-bad-input skip): unreadable files, bad lines
  int64_t empty_documents = 0;
  bool want_valid = false;  // a validation split was asked for
  int64_t counted_docs = 0;  // readable documents (counted only when want_valid)
  SplitReport train, valid;
  SftReport sft;
};

// Runs `opt` with `tok` (loaded from opt.tokenizer_path by the caller, so that an
// unusable tokenizer is reported before anything is read or written). Throws BadInput for a user error (a missing input, a bad line unless
// skipped, nothing to write), Stopped when opt.stop_signal is set before the outputs
// are complete; either way no output file (temporary ones included) is left behind.
// `chat`: the chat template and token sets of --format sft (required then; loaded by the
// caller so that a bad template is reported before anything is read).
PrepReport Prepare(const Options& opt, const tokenizer::Tokenizer& tok, const ChatSetup* chat = nullptr);

}  // namespace ps::prep
