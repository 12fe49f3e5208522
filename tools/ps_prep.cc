// ps_prep: text and JSONL files -> token files that ps_train reads (docs/data.md).
//
//   ps_prep --tokenizer tok.json --input a.txt b.jsonl --output-prefix out/corpus
//     -> out/corpus_train.{bin,idx} and out/corpus_valid.{bin,idx}  (data.format: megatron)
//   ps_prep ... --format llmc  -> out/corpus_train.bin, out/corpus_valid.bin (data.format: llmc)
//   echo "some text" | ps_prep --tokenizer tok.json --print-ids
//
// Documents: each line of a .jsonl/.ndjson input (its --jsonl-field string); a text input
// is one document, or one per paragraph (--text-split blank-line) or line (line). Each
// document's ids are followed by the tokenizer's end-of-text id. A seeded, exact-size
// random subset of the documents (in input order) forms the validation split.
//
// Threads: the main thread reads documents and writes results in input order; a pool of
// --threads workers parses JSON, checks UTF-8 and encodes batches of documents.
#include <c10/util/Exception.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <future>
#include <iostream>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

// File names may hold commas: no splitting of --input values (cxxopts splits on ',').
#define CXXOPTS_VECTOR_DELIMITER '\0'
#include <cxxopts.hpp>
#include <nlohmann/json.hpp>

#include "data/megatron_format.h"
#include "data/token_source.h"
#include "tokenizer/tokenizer.h"

namespace ps::prep {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kExitBadInput = 1;
constexpr int kExitUsage = 2;

enum class OutputFormat { kMegatron, kLlmc };
enum class TextSplit { kFile, kBlankLine, kLine };

struct Options {
  std::string tokenizer_path;
  std::vector<std::string> inputs;
  std::string output_prefix;
  OutputFormat format = OutputFormat::kMegatron;
  std::string jsonl_field = "text";
  TextSplit text_split = TextSplit::kFile;
  double valid_fraction = 0.01;
  int64_t valid_docs = -1;  // >= 0: exactly this many validation documents
  uint64_t seed = 1234;
  int threads = 1;
  bool skip_bad_input = false;
  bool append_eot = true;
};

// A user error in the input (or a missing input): printed as is, exit status 1.
class BadInput : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

std::string ErrorText(const std::exception& e) {
  if (const auto* c10 = dynamic_cast<const c10::Error*>(&e)) return c10->what_without_backtrace();
  return e.what();
}

// ---------------------------------------------------------------------------------------
// Documents.

struct Document {
  std::string text;         // the document (text input) or its JSON line (JSONL input)
  int32_t file_index = 0;   // into Options::inputs
  int64_t line = 0;         // 1-based line where it starts
  int64_t input_bytes = 0;  // input consumed, newlines included (progress)
  bool is_json = false;
  bool valid = false;       // belongs to the validation split
  std::string error;        // set by the reader for an unreadable input
};

bool IsJsonl(const std::string& path) {
  const std::string ext = std::filesystem::path(path).extension().string();
  return ext == ".jsonl" || ext == ".ndjson";
}

bool IsBlank(const std::string& line) {
  return line.find_first_not_of(" \t\r") == std::string::npos;
}

// Enumerates the documents of the inputs in order. The split (Algorithm S, Knuth TAOCP
// 3.4.2: each document is chosen with probability still-needed / still-left) needs the
// number of documents up front, so Prepare() runs ForEach twice: a counting pass, then
// the real one; both see the same documents.
class DocumentReader {
 public:
  explicit DocumentReader(const Options& opt) : opt_(opt) {}

  template <typename Emit>  // void(Document&&)
  void ForEach(Emit&& emit) const {
    for (int32_t f = 0; f < static_cast<int32_t>(opt_.inputs.size()); ++f) ReadFile(f, emit);
  }

 private:
  template <typename Emit>
  void ReadFile(int32_t f, Emit& emit) const {
    const std::string& path = opt_.inputs[f];
    std::error_code ec;
    std::ifstream in;
    if (std::filesystem::is_directory(path, ec)) {
      emit(Error(f, path + ": is a directory, not an input file"));
      return;
    }
    in.open(path, std::ios::binary);
    if (!in) {
      emit(Error(f, path + ": cannot open: " + std::strerror(errno)));
      return;
    }
    const bool json = IsJsonl(path);
    if (!json && opt_.text_split == TextSplit::kFile) {
      std::ostringstream all;
      all << in.rdbuf();
      Document d = Make(f, 1, all.str());
      d.input_bytes = static_cast<int64_t>(d.text.size());
      if (!d.text.empty()) emit(std::move(d));
      return;
    }
    std::string line;
    Document para;  // blank-line mode: the paragraph being gathered
    int64_t line_no = 0, blank_bytes = 0;  // blank lines count with the next document
    while (std::getline(in, line)) {
      ++line_no;
      const int64_t bytes = static_cast<int64_t>(line.size()) + 1;
      if (!line.empty() && line.back() == '\r') line.pop_back();  // CRLF: the newline is "\r\n"
      if (json || opt_.text_split == TextSplit::kLine) {
        if (IsBlank(line)) {
          blank_bytes += bytes;
          continue;
        }
        Document d = Make(f, line_no, std::move(line));
        d.is_json = json;
        d.input_bytes = bytes + blank_bytes;
        blank_bytes = 0;
        emit(std::move(d));
        continue;
      }
      if (IsBlank(line)) {
        if (!para.text.empty()) emit(std::move(para));
        para = Document();
        blank_bytes += bytes;
        continue;
      }
      if (para.text.empty()) para = Make(f, line_no, "");
      else para.text += '\n';
      para.text += line;
      para.input_bytes += bytes + blank_bytes;
      blank_bytes = 0;
    }
    if (!para.text.empty()) emit(std::move(para));
  }

  static Document Make(int32_t f, int64_t line, std::string text) {
    Document d;
    d.file_index = f;
    d.line = line;
    d.text = std::move(text);
    return d;
  }
  static Document Error(int32_t f, std::string error) {
    Document d = Make(f, 0, "");
    d.error = std::move(error);
    return d;
  }

  const Options& opt_;
};

// Offset of the first byte that is not part of well-formed UTF-8 (no overlong forms,
// surrogates or code points above U+10FFFF), or -1.
int64_t FirstInvalidUtf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const int64_t n = static_cast<int64_t>(s.size());
  int64_t i = 0;
  while (i < n) {
    const unsigned char c = p[i];
    if (c < 0x80) { ++i; continue; }
    int len = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c >= 0xE0 && c <= 0xEF) { len = 3; if (c == 0xE0) lo = 0xA0; if (c == 0xED) hi = 0x9F; }
    else if (c >= 0xF0 && c <= 0xF4) { len = 4; if (c == 0xF0) lo = 0x90; if (c == 0xF4) hi = 0x8F; }
    else return i;
    if (i + len > n || p[i + 1] < lo || p[i + 1] > hi) return i;
    for (int k = 2; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return i;
    }
    i += len;
  }
  return -1;
}

// ---------------------------------------------------------------------------------------
// Encoding (worker threads).

struct Encoded {
  std::vector<int32_t> ids;  // end-of-text included
  std::string error;         // a bad input: "file:line: what"
  bool empty = false;        // a JSONL document with an empty text
};

struct Batch {
  std::vector<Document> docs;
  int64_t text_bytes = 0;
};

struct EncodedBatch {
  std::vector<Document> docs;  // texts released; metadata kept for the writer
  std::vector<Encoded> results;
};

class Encoder {
 public:
  Encoder(const Options& opt, const tokenizer::Tokenizer& tok, std::optional<int32_t> eot)
      : opt_(opt), tok_(tok), eot_(eot) {}

  EncodedBatch EncodeBatch(Batch batch) const {
    EncodedBatch out;
    out.results.reserve(batch.docs.size());
    for (Document& d : batch.docs) {
      out.results.push_back(EncodeOne(d));
      d.text = std::string();
    }
    out.docs = std::move(batch.docs);
    return out;
  }

 private:
  Encoded EncodeOne(const Document& d) const {
    Encoded out;
    if (!d.error.empty()) {
      out.error = d.error;
      return out;
    }
    const std::string& file = opt_.inputs[d.file_index];
    const std::string where = file + ":" + std::to_string(d.line);
    std::string field;  // the JSONL document's text
    std::string_view text = d.text;
    if (d.is_json) {
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(d.text);
      } catch (const nlohmann::json::exception& e) {
        out.error = where + ": not a JSON line: " + e.what();
        return out;
      }
      if (!j.is_object()) {
        out.error = where + ": not a JSON object";
        return out;
      }
      const auto it = j.find(opt_.jsonl_field);
      if (it == j.end() || !it->is_string()) {
        out.error = where + ": " + (it == j.end() ? "no" : "a non-string") + " \"" +
                    opt_.jsonl_field + "\" field (--jsonl-field)";
        return out;
      }
      field = it->get<std::string>();  // UTF-8 checked by the JSON parser
      text = field;
    } else {
      const int64_t bad = FirstInvalidUtf8(text);
      if (bad >= 0) {
        const int64_t line = d.line + std::count(text.begin(), text.begin() + bad, '\n');
        const int64_t line_start = text.rfind('\n', bad) == std::string_view::npos
                                       ? 0 : static_cast<int64_t>(text.rfind('\n', bad)) + 1;
        char byte[8];
        std::snprintf(byte, sizeof(byte), "0x%02X", static_cast<unsigned char>(text[bad]));
        out.error = file + ":" + std::to_string(line) + ": invalid UTF-8 (byte " + byte +
                    " at column " + std::to_string(bad - line_start + 1) + ")";
        return out;
      }
    }
    if (text.empty()) {
      out.empty = true;
      return out;
    }
    try {
      out.ids = tok_.Encode(text);
    } catch (const std::exception& e) {
      out.error = where + ": " + ErrorText(e);
      return out;
    }
    if (eot_) out.ids.push_back(*eot_);
    return out;
  }

  const Options& opt_;
  const tokenizer::Tokenizer& tok_;
  std::optional<int32_t> eot_;
};

// A fixed pool of threads running EncodeBatch; results come back as futures, which the
// main thread takes in submission order.
class EncodePool {
 public:
  EncodePool(int num_threads, const Encoder& encoder) : encoder_(encoder) {
    for (int i = 0; i < num_threads; ++i) threads_.emplace_back([this] { Work(); });
  }
  // Queued batches are dropped (their futures report a broken promise); running ones finish.
  ~EncodePool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
      tasks_.clear();
    }
    cv_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

  std::future<EncodedBatch> Submit(Batch batch) {
    std::packaged_task<EncodedBatch()> task(
        [this, b = std::move(batch)]() mutable { return encoder_.EncodeBatch(std::move(b)); });
    std::future<EncodedBatch> result = task.get_future();
    {
      std::lock_guard<std::mutex> lock(mu_);
      tasks_.push_back(std::move(task));
    }
    cv_.notify_one();
    return result;
  }

 private:
  void Work() {
    for (;;) {
      std::packaged_task<EncodedBatch()> task;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return stop_ || !tasks_.empty(); });
        if (tasks_.empty()) return;
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      task();
    }
  }

  const Encoder& encoder_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::packaged_task<EncodedBatch()>> tasks_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

// ---------------------------------------------------------------------------------------
// Output.

// One split's output files.
class SplitWriter {
 public:
  virtual ~SplitWriter() = default;
  virtual void AddDocument(const std::vector<int32_t>& ids) = 0;
  virtual void Finish() = 0;
  virtual int64_t num_documents() const = 0;
  virtual int64_t num_tokens() const = 0;
  virtual std::vector<std::string> files() const = 0;
  virtual std::string dtype() const = 0;
};

class MegatronSplitWriter final : public SplitWriter {
 public:
  MegatronSplitWriter(const std::string& prefix, int64_t vocab_size)
      : dtype_(data::MegatronDtypeForVocab(vocab_size)), writer_(prefix, dtype_) {}
  void AddDocument(const std::vector<int32_t>& ids) override {
    writer_.AddDocument(ids.data(), static_cast<int64_t>(ids.size()));
  }
  void Finish() override { writer_.Finish(); }
  int64_t num_documents() const override { return writer_.num_documents(); }
  int64_t num_tokens() const override { return writer_.num_tokens(); }
  std::vector<std::string> files() const override {
    return {writer_.paths().bin_path, writer_.paths().idx_path};
  }
  std::string dtype() const override { return data::ToString(dtype_); }

 private:
  data::MegatronDtype dtype_;
  data::MegatronWriter writer_;
};

// An llm.c shard (dev/data/data_common.py): 256 x int32 header {magic, version, count},
// then uint16 ids (GPT-2 magic) or uint32 ids (Llama-3 magic) when they do not fit 16 bits.
// Written as "<path>.tmp", renamed by Finish(); removed if never finished.
class LlmcSplitWriter final : public SplitWriter {
 public:
  LlmcSplitWriter(const std::string& path, int64_t vocab_size)
      : path_(path), tmp_(path + ".tmp"), wide_(vocab_size > 65536) {
    file_ = std::fopen(tmp_.c_str(), "wb");
    TORCH_CHECK(file_ != nullptr, tmp_, ": cannot create: ", std::strerror(errno));
    const std::vector<int32_t> header(256, 0);  // written for real by Finish()
    Write(header.data(), data::kLlmcHeaderBytes);
  }
  ~LlmcSplitWriter() override {
    if (file_ == nullptr) return;
    std::fclose(file_);
    std::remove(tmp_.c_str());
  }
  void AddDocument(const std::vector<int32_t>& ids) override {
    TORCH_CHECK(num_tokens_ + static_cast<int64_t>(ids.size()) <= INT32_MAX, path_,
                ": an llm.c shard holds at most 2^31 - 1 tokens (int32 count); use --format megatron");
    if (wide_) {
      Write(ids.data(), 4 * ids.size());
    } else {
      narrow_.assign(ids.begin(), ids.end());
      Write(narrow_.data(), 2 * narrow_.size());
    }
    num_tokens_ += static_cast<int64_t>(ids.size());
    ++num_documents_;
  }
  void Finish() override {
    std::vector<int32_t> header(256, 0);
    header[0] = wide_ ? data::kLlmcMagicLlama3 : data::kLlmcMagicGpt2;
    header[1] = wide_ ? 7 : 1;
    header[2] = static_cast<int32_t>(num_tokens_);
    TORCH_CHECK(std::fseek(file_, 0, SEEK_SET) == 0, tmp_, ": seek failed: ", std::strerror(errno));
    Write(header.data(), data::kLlmcHeaderBytes);
    const bool ok = std::ferror(file_) == 0;
    const int rc = std::fclose(file_);
    file_ = nullptr;
    TORCH_CHECK(ok && rc == 0, tmp_, ": write failed: ", std::strerror(errno));
    TORCH_CHECK(std::rename(tmp_.c_str(), path_.c_str()) == 0, path_, ": cannot rename from ",
                tmp_, ": ", std::strerror(errno));
  }
  int64_t num_documents() const override { return num_documents_; }
  int64_t num_tokens() const override { return num_tokens_; }
  std::vector<std::string> files() const override { return {path_}; }
  std::string dtype() const override { return wide_ ? "uint32" : "uint16"; }

 private:
  void Write(const void* data, size_t bytes) {
    TORCH_CHECK(bytes == 0 || std::fwrite(data, 1, bytes, file_) == bytes, tmp_,
                ": write failed: ", std::strerror(errno));
  }

  std::string path_, tmp_;
  bool wide_;
  std::FILE* file_ = nullptr;
  std::vector<uint16_t> narrow_;
  int64_t num_tokens_ = 0, num_documents_ = 0;
};

std::unique_ptr<SplitWriter> MakeWriter(const Options& opt, const std::string& split,
                                        int64_t vocab_size) {
  const std::string name = opt.output_prefix + "_" + split;
  if (opt.format == OutputFormat::kLlmc) return std::make_unique<LlmcSplitWriter>(name + ".bin", vocab_size);
  return std::make_unique<MegatronSplitWriter>(name, vocab_size);
}

// ---------------------------------------------------------------------------------------
// Progress on stderr: a bar redrawn in place on a terminal, else a plain line every 10 s.

std::string HumanBytes(double bytes) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  int u = 0;
  while (bytes >= 1000 && u < 4) { bytes /= 1000; ++u; }
  char buf[32];
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.1f %s", bytes, units[u]);
  return buf;
}

std::string HumanCount(double n) {
  char buf[32];
  if (n >= 1e9) std::snprintf(buf, sizeof(buf), "%.2fG", n / 1e9);
  else if (n >= 1e6) std::snprintf(buf, sizeof(buf), "%.2fM", n / 1e6);
  else if (n >= 1e3) std::snprintf(buf, sizeof(buf), "%.1fk", n / 1e3);
  else std::snprintf(buf, sizeof(buf), "%.0f", n);
  return buf;
}

class Progress {
 public:
  explicit Progress(int64_t total_bytes)
      : total_bytes_(total_bytes), tty_(::isatty(STDERR_FILENO) == 1), start_(Clock::now()),
        last_(start_) {}

  void Update(int64_t bytes, int64_t tokens) {
    const auto now = Clock::now();
    if (now - last_ < (tty_ ? std::chrono::milliseconds(200) : std::chrono::seconds(10))) return;
    last_ = now;
    Print(bytes, tokens);
  }
  void Done(int64_t bytes, int64_t tokens) {
    if (tty_) {
      Print(bytes, tokens);
      std::fprintf(stderr, "\n");
    }
  }
  double elapsed_s() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

 private:
  void Print(int64_t bytes, int64_t tokens) const {
    const double t = std::max(elapsed_s(), 1e-9);
    const double frac = total_bytes_ > 0 ? std::min(1.0, double(bytes) / total_bytes_) : 1.0;
    const double eta_s = frac > 0 ? t * (1 - frac) / frac : 0;
    char eta[32];
    std::snprintf(eta, sizeof(eta), "%d:%02d", int(eta_s) / 60, int(eta_s) % 60);
    const std::string rate = HumanCount(tokens / t) + " tokens/s, " + HumanBytes(bytes / t) + "/s";
    if (tty_) {
      constexpr int kWidth = 30;
      const int filled = static_cast<int>(frac * kWidth);
      std::string bar(filled, '=');
      if (filled < kWidth) bar += '>' + std::string(kWidth - filled - 1, ' ');
      std::fprintf(stderr, "\r[%s] %5.1f%%  %s tokens  %s  ETA %s  ", bar.c_str(), 100 * frac,
                   HumanCount(tokens).c_str(), rate.c_str(), eta);
    } else {
      std::fprintf(stderr, "ps_prep: %.1f%% of input, %s tokens, %s, ETA %s\n", 100 * frac,
                   HumanCount(tokens).c_str(), rate.c_str(), eta);
    }
    std::fflush(stderr);
  }

  int64_t total_bytes_;
  bool tty_;
  Clock::time_point start_, last_;
};

// ---------------------------------------------------------------------------------------
// The run.

struct Totals {
  int64_t bad_inputs = 0;      // skipped: unreadable files, bad lines
  int64_t empty_documents = 0;
  int64_t input_bytes = 0;
  int64_t tokens = 0;
};

int64_t ValidCount(const Options& opt, int64_t num_docs) {
  if (opt.valid_docs >= 0) return std::min(opt.valid_docs, num_docs > 0 ? num_docs - 1 : 0);
  if (opt.valid_fraction <= 0 || num_docs < 2) return 0;
  const int64_t k = static_cast<int64_t>(std::llround(opt.valid_fraction * num_docs));
  return std::clamp<int64_t>(k, 1, num_docs - 1);
}

int Prepare(const Options& opt) {
  auto tok = tokenizer::LoadTokenizer(opt.tokenizer_path);
  const std::optional<int32_t> eot = opt.append_eot ? tok->end_of_text_id() : std::nullopt;
  if (opt.append_eot && !eot) {
    throw BadInput(opt.tokenizer_path + ": the tokenizer has no end-of-text token to separate "
                   "documents; pass --no-eot to write documents back to back");
  }
  int64_t total_bytes = 0;
  for (const std::string& path : opt.inputs) {
    std::error_code ec;
    const bool regular = std::filesystem::is_regular_file(path, ec);
    if (regular) total_bytes += static_cast<int64_t>(std::filesystem::file_size(path, ec));
    if (!regular && !opt.skip_bad_input) {
      throw BadInput(path + ": " + (std::filesystem::exists(path, ec) ? "not a regular file" : "no such file") +
                     " (--input)");
    }
  }
  const std::filesystem::path parent = std::filesystem::path(opt.output_prefix).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent);

  DocumentReader reader(opt);
  Totals totals;
  const bool want_valid = opt.valid_docs > 0 || (opt.valid_docs < 0 && opt.valid_fraction > 0);
  int64_t num_docs = 0;
  if (want_valid) {
    reader.ForEach([&](Document&& d) { num_docs += d.error.empty(); });
  }
  int64_t valid_left = ValidCount(opt, num_docs), docs_left = num_docs;
  std::mt19937_64 rng(opt.seed);

  std::unique_ptr<SplitWriter> train = MakeWriter(opt, "train", tok->vocab_size());
  std::unique_ptr<SplitWriter> valid = MakeWriter(opt, "valid", tok->vocab_size());
  Encoder encoder(opt, *tok, eot);
  EncodePool pool(opt.threads, encoder);
  std::deque<std::future<EncodedBatch>> in_flight;
  const size_t max_in_flight = 2 * static_cast<size_t>(opt.threads) + 2;
  constexpr int64_t kBatchTextBytes = 256 << 10;
  Progress progress(total_bytes);
  int shown_warnings = 0;

  const auto take_oldest = [&] {
    EncodedBatch b = in_flight.front().get();
    in_flight.pop_front();
    for (size_t i = 0; i < b.results.size(); ++i) {
      const Encoded& r = b.results[i];
      totals.input_bytes += b.docs[i].input_bytes;
      if (!r.error.empty()) {
        if (!opt.skip_bad_input) throw BadInput(r.error + " (--on-bad-input skip skips it)");
        ++totals.bad_inputs;
        if (++shown_warnings <= 20) std::fprintf(stderr, "ps_prep: skipped %s\n", r.error.c_str());
        if (shown_warnings == 20) std::fprintf(stderr, "ps_prep: (further skipped inputs not shown)\n");
        continue;
      }
      if (r.empty) {
        ++totals.empty_documents;
        continue;
      }
      (b.docs[i].valid ? valid : train)->AddDocument(r.ids);
      totals.tokens += static_cast<int64_t>(r.ids.size());
    }
    progress.Update(totals.input_bytes, totals.tokens);
  };

  Batch batch;
  const auto submit = [&] {
    in_flight.push_back(pool.Submit(std::move(batch)));
    batch = Batch();
    while (in_flight.size() > max_in_flight) take_oldest();
  };
  reader.ForEach([&](Document&& d) {
    if (d.error.empty() && docs_left > 0) {  // Algorithm S
      d.valid = static_cast<int64_t>(rng() % static_cast<uint64_t>(docs_left)) < valid_left;
      valid_left -= d.valid;
      --docs_left;
    }
    batch.text_bytes += static_cast<int64_t>(d.text.size());
    batch.docs.push_back(std::move(d));
    if (batch.text_bytes >= kBatchTextBytes) submit();
  });
  if (!batch.docs.empty()) submit();
  while (!in_flight.empty()) take_oldest();
  progress.Done(totals.input_bytes, totals.tokens);

  if (train->num_documents() == 0) throw BadInput("no documents to write (all inputs empty or skipped)");
  train->Finish();
  if (valid->num_documents() > 0) valid->Finish();

  const double secs = progress.elapsed_s();
  std::printf("ps_prep: tokenizer %s (%s, vocab %lld, end-of-text %s)\n", opt.tokenizer_path.c_str(),
              tokenizer::ToString(tok->kind()), static_cast<long long>(tok->vocab_size()),
              eot ? std::to_string(*eot).c_str() : "not appended");
  std::printf("ps_prep: %lld documents (train %lld, valid %lld), %lld tokens in %.1f s: %s tokens/s, %s/s of input\n",
              static_cast<long long>(train->num_documents() + valid->num_documents()),
              static_cast<long long>(train->num_documents()), static_cast<long long>(valid->num_documents()),
              static_cast<long long>(totals.tokens), secs, HumanCount(totals.tokens / secs).c_str(),
              HumanBytes(total_bytes / secs).c_str());
  if (totals.bad_inputs > 0 || totals.empty_documents > 0) {
    std::printf("ps_prep: skipped %lld bad inputs (--on-bad-input skip) and %lld empty documents\n",
                static_cast<long long>(totals.bad_inputs), static_cast<long long>(totals.empty_documents));
  }
  for (const auto* w : {train.get(), valid.get()}) {
    if (w->num_documents() == 0) {
      std::printf("  (no validation split: %s)\n", !want_valid     ? "none requested"
                                                    : num_docs < 2 ? "fewer than 2 documents"
                                                                   : "its documents were skipped");
      continue;
    }
    for (const std::string& f : w->files()) {
      std::printf("  %s  %s  (%lld documents, %lld %s tokens)\n", f.c_str(),
                  HumanBytes(static_cast<double>(std::filesystem::file_size(f))).c_str(),
                  static_cast<long long>(w->num_documents()), static_cast<long long>(w->num_tokens()),
                  w->dtype().c_str());
    }
  }
  return 0;
}

// --print-ids: one line of space-separated ids per line of stdin (its newline not encoded).
int PrintIds(const std::string& tokenizer_path) {
  auto tok = tokenizer::LoadTokenizer(tokenizer_path);
  std::string line, out;
  int64_t line_no = 0;
  while (std::getline(std::cin, line)) {
    ++line_no;
    const int64_t bad = FirstInvalidUtf8(line);
    if (bad >= 0) throw BadInput("stdin:" + std::to_string(line_no) + ": invalid UTF-8 at column " + std::to_string(bad + 1));
    out.clear();
    for (int32_t id : tok->Encode(line)) {
      if (!out.empty()) out += ' ';
      out += std::to_string(id);
    }
    out += '\n';
    std::fwrite(out.data(), 1, out.size(), stdout);
  }
  return 0;
}

int Main(int argc, char** argv) {
  cxxopts::Options spec("ps_prep", "Text / JSONL -> token files for ps_train (docs/data.md)");
  // clang-format off
  spec.add_options()
    ("tokenizer", "tokenizer.json, vocab.json/merges.txt/vocab.txt, or a folder holding them", cxxopts::value<std::string>())
    ("input", "input files: .jsonl/.ndjson (one JSON object per line) or text", cxxopts::value<std::vector<std::string>>())
    ("output-prefix", "writes <prefix>_train.* and <prefix>_valid.*", cxxopts::value<std::string>())
    ("format", "megatron (.bin + .idx) or llmc (one shard per split)", cxxopts::value<std::string>()->default_value("megatron"))
    ("jsonl-field", "the JSON string field holding a document's text", cxxopts::value<std::string>()->default_value("text"))
    ("text-split", "documents of a text input: file (the whole file), blank-line (paragraphs) or line",
     cxxopts::value<std::string>()->default_value("file"))
    ("valid-fraction", "fraction of documents for validation (rounded; at least 1 when > 0)",
     cxxopts::value<double>()->default_value("0.01"))
    ("valid-docs", "exactly N validation documents (instead of --valid-fraction)", cxxopts::value<int64_t>())
    ("seed", "seed of the train/valid split", cxxopts::value<uint64_t>()->default_value("1234"))
    ("threads", "encoding threads (default: the number of cores)", cxxopts::value<int>())
    ("on-bad-input", "stop (exit 1 naming file:line) or skip (count and go on)",
     cxxopts::value<std::string>()->default_value("stop"))
    ("no-eot", "do not append the end-of-text token after each document")
    ("print-ids", "encode each line of stdin; print its ids space-separated, one line per line")
    ("h,help", "this help");
  // clang-format on
  // cxxopts leaves positional options out of the option list: the usage line names --input.
  spec.parse_positional({"input"});
  spec.custom_help("--tokenizer T --input FILE [FILE...] --output-prefix P [OPTION...]\n"
                   "  ps_prep --tokenizer T --print-ids < text\n\n"
                   "  --input FILE...: .jsonl/.ndjson (a document per line, --jsonl-field) or text\n"
                   "  (documents per --text-split); the files after --input are inputs too");
  spec.positional_help("");
  Options opt;
  cxxopts::ParseResult args;
  try {
    args = spec.parse(argc, argv);
  } catch (const cxxopts::exceptions::exception& e) {
    std::fprintf(stderr, "ps_prep: %s (see --help)\n", e.what());
    return kExitUsage;
  }
  if (args.count("help")) {
    std::printf("%s\n", spec.help().c_str());
    return 0;
  }
  const auto usage = [](const std::string& msg) {
    std::fprintf(stderr, "ps_prep: %s (see --help)\n", msg.c_str());
    return kExitUsage;
  };
  if (!args.count("tokenizer")) return usage("--tokenizer is required");
  opt.tokenizer_path = args["tokenizer"].as<std::string>();
  if (args.count("print-ids")) return PrintIds(opt.tokenizer_path);

  if (!args.count("input")) return usage("--input is required");
  if (!args.count("output-prefix")) return usage("--output-prefix is required");
  opt.inputs = args["input"].as<std::vector<std::string>>();
  opt.output_prefix = args["output-prefix"].as<std::string>();
  const std::string format = args["format"].as<std::string>();
  if (format == "megatron") opt.format = OutputFormat::kMegatron;
  else if (format == "llmc") opt.format = OutputFormat::kLlmc;
  else return usage("--format " + format + ": expected megatron or llmc");
  opt.jsonl_field = args["jsonl-field"].as<std::string>();
  const std::string split = args["text-split"].as<std::string>();
  if (split == "file") opt.text_split = TextSplit::kFile;
  else if (split == "blank-line") opt.text_split = TextSplit::kBlankLine;
  else if (split == "line") opt.text_split = TextSplit::kLine;
  else return usage("--text-split " + split + ": expected file, blank-line or line");
  opt.valid_fraction = args["valid-fraction"].as<double>();
  if (!(opt.valid_fraction >= 0 && opt.valid_fraction < 1)) return usage("--valid-fraction must be in [0, 1)");
  if (args.count("valid-docs")) {
    if (args.count("valid-fraction")) return usage("give --valid-fraction or --valid-docs, not both");
    opt.valid_docs = args["valid-docs"].as<int64_t>();
    if (opt.valid_docs < 0) return usage("--valid-docs must be >= 0");
  }
  opt.seed = args["seed"].as<uint64_t>();
  opt.threads = args.count("threads") ? args["threads"].as<int>()
                                      : std::max(1u, std::thread::hardware_concurrency());
  if (opt.threads < 1) return usage("--threads must be >= 1");
  const std::string bad = args["on-bad-input"].as<std::string>();
  if (bad != "stop" && bad != "skip") return usage("--on-bad-input " + bad + ": expected stop or skip");
  opt.skip_bad_input = bad == "skip";
  opt.append_eot = !args.count("no-eot");
  return Prepare(opt);
}

}  // namespace
}  // namespace ps::prep

int main(int argc, char** argv) {
  try {
    return ps::prep::Main(argc, argv);
  } catch (const ps::prep::BadInput& e) {
    std::fprintf(stderr, "ps_prep: %s\n", e.what());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ps_prep: %s\n", ps::prep::ErrorText(e).c_str());
  }
  return ps::prep::kExitBadInput;
}
