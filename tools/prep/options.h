// The options of one ps_prep run (tools/ps_prep.cc parses them from the command line) and
// the error type for bad input. Plain data, read by every piece of tools/prep/.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

#include "tools/prep/sft_options.h"

namespace ps::prep {

// kSft: chat/instruction JSONL rendered with the chat template -> Megatron .bin/.idx plus
// a .mask of one uint8 per token (sft_options.h, docs/data.md).
enum class OutputFormat { kMegatron, kLlmc, kSft };
// How a text (non-JSONL) input becomes documents: the whole file, one per paragraph
// (blank lines between), or one per line.
enum class TextSplit { kFile, kBlankLine, kLine };

struct Options {
  std::string tokenizer_path;
  std::vector<std::string> inputs;  // .jsonl/.ndjson: a document per line; else text
  std::string output_prefix;        // writes <prefix>_train.* and <prefix>_valid.*
  OutputFormat format = OutputFormat::kMegatron;
  std::string jsonl_field = "text";  // the JSON string field holding a document's text
  TextSplit text_split = TextSplit::kFile;
  double valid_fraction = 0.01;  // of the documents, rounded; at least 1 when > 0
  int64_t valid_docs = -1;       // >= 0: exactly this many validation documents
  uint64_t seed = 1234;          // of the train/valid split
  int threads = 1;               // encoding threads
  bool skip_bad_input = false;   // count and skip bad inputs (else stop at the first)
  bool append_eot = true;        // the end-of-text id after each document (not with kSft)
  SftOptions sft;                // format kSft only
  // Set (to the signal number) by ps_prep's SIGTERM/SIGINT handler; Prepare and the
  // encoding threads poll it and stop with Stopped. nullptr: never stopped.
  const std::atomic<int>* stop_signal = nullptr;
};

// The largest --threads: more encoding threads than this only cost memory and start-up.
constexpr int kMaxThreads = 1024;

// A user error in the input (or a missing input): printed as is, exit status 1.
class BadInput : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A run stopped by a signal (Options::stop_signal); no output file is left behind.
class Stopped : public std::runtime_error {
 public:
  explicit Stopped(int signal)
      : std::runtime_error("stopped by signal " + std::to_string(signal) + "; no output written"), signal_(signal) {}
  int signal() const { return signal_; }

 private:
  int signal_;
};

// The message of `e`, without the backtrace of a c10::Error.
std::string ErrorText(const std::exception& e);

}  // namespace ps::prep
