#include "tools/prep/prepare.h"

#include <c10/util/Exception.h>

#include <cstdio>
#include <deque>
#include <filesystem>
#include <future>
#include <memory>
#include <utility>

#include "tools/prep/document_reader.h"
#include "tools/prep/encode_pool.h"
#include "tools/prep/outputs.h"
#include "tools/prep/progress.h"

namespace ps::prep {
namespace {

// Documents per batch of the pool: about this many bytes of text.
constexpr int64_t kBatchTextBytes = 256 << 10;
// Skipped inputs named on stderr; the rest are only counted.
constexpr int kMaxShownWarnings = 20;

// The total size of the inputs (for progress); BadInput for a missing one unless skipped.
int64_t InputBytes(const Options& opt) {
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
  return total_bytes;
}

// Throws Stopped once a signal asked the run to stop.
void CheckStop(const Options& opt) {
  if (opt.stop_signal == nullptr) return;
  const int signal = opt.stop_signal->load();
  if (signal != 0) throw Stopped(signal);
}

SplitReport ReportOf(const SplitWriter& w) {
  SplitReport r;
  if (w.num_documents() > 0) r.files = w.files();
  r.num_documents = w.num_documents();
  r.num_tokens = w.num_tokens();
  r.dtype = w.dtype();
  return r;
}

// Counts result `r` into `report`; whether its ids are to be written. BadInput for a bad
// input unless skipped.
bool Collect(const Options& opt, const Encoded& r, PrepReport& report, int& shown_warnings) {
  if (!r.error.empty()) {
    if (!opt.skip_bad_input) throw BadInput(r.error + " (--on-bad-input skip skips it)");
    ++report.bad_inputs;
    if (++shown_warnings <= kMaxShownWarnings) std::fprintf(stderr, "ps_prep: skipped %s\n", r.error.c_str());
    if (shown_warnings == kMaxShownWarnings) std::fprintf(stderr, "ps_prep: (further skipped inputs not shown)\n");
    return false;
  }
  report.empty_documents += r.empty;
  report.sft.dropped_overlong += r.dropped_overlong;
  report.sft.dropped_untrained += r.dropped_untrained;
  if (r.empty || r.dropped_overlong || r.dropped_untrained) return false;
  report.sft.truncated += r.truncated;
  report.sft.turns_without_eot += r.turns_without_eot;
  for (uint8_t m : r.mask) report.sft.trained_tokens += m;
  report.tokens += static_cast<int64_t>(r.ids.size());
  return true;
}

// Every file of both splits complete before any is renamed into place, so a write that
// fails (a full disk) leaves the dataset already at this prefix whole; a run without a
// validation split removes one an earlier run left there (it belongs to another corpus).
void PutInPlace(SplitWriter& train, SplitWriter& valid) {
  train.Close();
  if (valid.num_documents() > 0) valid.Close();
  train.Commit();
  if (valid.num_documents() > 0) {
    valid.Commit();
  } else {
    for (const std::string& stale : valid.files()) std::remove(stale.c_str());
  }
}

}  // namespace

PrepReport Prepare(const Options& opt, const tokenizer::Tokenizer& loaded, const ChatSetup* chat) {
  const tokenizer::Tokenizer* tok = &loaded;
  PrepReport report;
  report.tokenizer_kind = tok->kind();
  report.vocab_size = tok->vocab_size();
  report.eot = opt.append_eot && opt.format != OutputFormat::kSft ? tok->end_of_text_id() : std::nullopt;
  if (opt.append_eot && !report.eot && opt.format != OutputFormat::kSft) {
    throw BadInput(opt.tokenizer_path + ": the tokenizer has no end-of-text token to separate "
                   "documents; pass --no-eot to write documents back to back");
  }
  report.input_bytes = InputBytes(opt);
  const std::filesystem::path parent = std::filesystem::path(opt.output_prefix).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent);

  DocumentReader reader(opt);
  report.want_valid = opt.valid_docs > 0 || (opt.valid_docs < 0 && opt.valid_fraction > 0);
  if (report.want_valid) {
    reader.ForEach([&](Document&& d) {
      CheckStop(opt);
      report.counted_docs += d.error.empty();
    });
  }
  ValidSplit split(opt, report.counted_docs);

  std::unique_ptr<SplitWriter> train = MakeWriter(opt, "train", tok->vocab_size());
  std::unique_ptr<SplitWriter> valid = MakeWriter(opt, "valid", tok->vocab_size());
  TORCH_INTERNAL_ASSERT(opt.format != OutputFormat::kSft || chat != nullptr, "--format sft needs its chat setup");
  std::optional<SftEncoder> sft;
  if (chat != nullptr) sft.emplace(*chat, *tok, opt.sft);
  if (chat != nullptr) report.sft.template_origin = chat->template_origin;
  Encoder encoder(opt, *tok, report.eot, sft ? &*sft : nullptr);
  EncodePool pool(opt.threads, encoder);
  std::deque<std::future<EncodedBatch>> in_flight;
  const size_t max_in_flight = 2 * static_cast<size_t>(opt.threads) + 2;
  Progress progress(report.input_bytes);
  int64_t consumed_bytes = 0;
  int shown_warnings = 0;

  const auto take_oldest = [&] {
    EncodedBatch b = in_flight.front().get();
    in_flight.pop_front();
    CheckStop(opt);  // the batch may be partly encoded
    for (size_t i = 0; i < b.results.size(); ++i) {
      consumed_bytes += b.docs[i].input_bytes;
      SplitWriter* out = (b.docs[i].valid ? valid : train).get();
      if (Collect(opt, b.results[i], report, shown_warnings)) out->AddDocument(b.results[i].ids, b.results[i].mask);
    }
    progress.Update(consumed_bytes, report.tokens);
  };

  Batch batch;
  const auto submit = [&] {
    in_flight.push_back(pool.Submit(std::move(batch)));
    batch = Batch();
    while (in_flight.size() > max_in_flight) take_oldest();
  };
  reader.ForEach([&](Document&& d) {
    CheckStop(opt);
    if (d.error.empty()) d.valid = split.Next();
    batch.text_bytes += static_cast<int64_t>(d.text.size());
    batch.docs.push_back(std::move(d));
    if (batch.text_bytes >= kBatchTextBytes) submit();
  });
  if (!batch.docs.empty()) submit();
  while (!in_flight.empty()) take_oldest();
  progress.Done(consumed_bytes, report.tokens);
  CheckStop(opt);

  if (train->num_documents() == 0) throw BadInput("no documents to write (all inputs empty or skipped)");
  PutInPlace(*train, *valid);
  report.elapsed_s = progress.elapsed_s();
  report.train = ReportOf(*train);
  report.valid = ReportOf(*valid);
  return report;
}

}  // namespace ps::prep
