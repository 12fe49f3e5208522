// Encoding of ps_prep's documents: Encoder turns a batch of documents into ids (or the
// error of each bad one); EncodePool runs it on a fixed set of threads. The main thread
// submits batches and takes the results, as futures, in submission order, so the output
// is in input order whatever the number of threads.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <future>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tokenizer/tokenizer.h"
#include "tools/prep/document_reader.h"
#include "tools/prep/options.h"
#include "tools/prep/sft_encoder.h"

namespace ps::prep {

struct Encoded {
  std::vector<int32_t> ids;  // end-of-text included
  std::string error;         // a bad input: "file:line: what"
  bool empty = false;        // a JSONL document with an empty text
  // --format sft: the loss mask ([ids.size()]) and what happened to the example.
  std::vector<uint8_t> mask;
  bool truncated = false;          // cut to --max-tokens
  bool dropped_overlong = false;   // longer than --max-tokens, --overlong drop: not written
  bool dropped_untrained = false;  // no trained token left after truncation: not written
  int64_t turns_without_eot = 0;
};

struct Batch {
  std::vector<Document> docs;
  int64_t text_bytes = 0;
};

struct EncodedBatch {
  std::vector<Document> docs;  // texts released; metadata kept for the writer
  std::vector<Encoded> results;
};

// Stateless: any number of threads may call EncodeBatch at once. Keeps references to
// `opt` and `tok`, which must outlive it. Once opt.stop_signal is set, the documents
// left in a batch are not encoded (the run is being abandoned).
class Encoder {
 public:
  // `eot`: appended after each document's ids, when set. `sft`: encodes the examples of
  // --format sft (then required).
  Encoder(const Options& opt, const tokenizer::Tokenizer& tok, std::optional<int32_t> eot,
          const SftEncoder* sft = nullptr)
      : opt_(opt), tok_(tok), eot_(eot), sft_(sft) {}

  EncodedBatch EncodeBatch(Batch batch) const;

 private:
  Encoded EncodeOne(const Document& d) const;
  Encoded EncodeSft(const Document& d) const;

  const Options& opt_;
  const tokenizer::Tokenizer& tok_;
  std::optional<int32_t> eot_;
  const SftEncoder* sft_;
};

// A fixed pool of threads running Encoder::EncodeBatch. Submit from one thread only.
class EncodePool {
 public:
  // Throws std::runtime_error naming --threads when the system cannot start
  // `num_threads` threads (the ones started are stopped first).
  EncodePool(int num_threads, const Encoder& encoder);
  // Queued batches are dropped (their futures report a broken promise); running ones finish.
  ~EncodePool();

  std::future<EncodedBatch> Submit(Batch batch);

 private:
  void Work();
  void Stop();  // drops queued batches, joins the threads

  const Encoder& encoder_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::packaged_task<EncodedBatch()>> tasks_;  // guarded by mu_
  bool stop_ = false;                                     // guarded by mu_
  std::vector<std::thread> threads_;
};

}  // namespace ps::prep
