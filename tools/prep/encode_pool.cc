#include "tools/prep/encode_pool.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <system_error>
#include <utility>

#include "tools/prep/sft_example.h"

namespace ps::prep {

EncodedBatch Encoder::EncodeBatch(Batch batch) const {
  EncodedBatch out;
  out.results.reserve(batch.docs.size());
  for (Document& d : batch.docs) {
    if (opt_.stop_signal != nullptr && opt_.stop_signal->load() != 0) {
      out.results.emplace_back();  // never written: Prepare stops before using it
      continue;
    }
    out.results.push_back(EncodeOne(d));
    d.text = std::string();
  }
  out.docs = std::move(batch.docs);
  return out;
}

Encoded Encoder::EncodeOne(const Document& d) const {
  if (opt_.format == OutputFormat::kSft) return EncodeSft(d);
  Encoded out;
  std::string field;  // the JSONL document's text
  std::string_view text;
  out.error = DocumentText(d, opt_, &field, &text);
  if (!out.error.empty()) return out;
  if (text.empty()) {
    out.empty = true;
    return out;
  }
  try {
    // The post-processor's special tokens (Llama's BOS) as HF's tokenizer(text) adds them.
    out.ids = tok_.EncodeWithSpecialTokens(text);
  } catch (const std::exception& e) {
    out.error = DocumentLocation(d, opt_) + ": " + ErrorText(e);
    return out;
  }
  // The separator, unless the post-processor ended the document with it (add_eos_token).
  if (eot_ && (out.ids.empty() || out.ids.back() != *eot_)) out.ids.push_back(*eot_);
  return out;
}

Encoded Encoder::EncodeSft(const Document& d) const {
  Encoded out;
  const std::string where = DocumentLocation(d, opt_);
  if (!d.error.empty()) {
    out.error = d.error;
    return out;
  }
  if (!d.is_json) {
    out.error = opt_.inputs[d.file_index] + ": --format sft reads JSONL (.jsonl/.ndjson), one example per line";
    return out;
  }
  SftExample ex;
  try {
    ex = sft_->Encode(ParseExample(nlohmann::ordered_json::parse(d.text), opt_.sft));
  } catch (const nlohmann::json::exception& e) {
    out.error = where + ": not a JSON line: " + e.what();
    return out;
  } catch (const std::exception& e) {
    out.error = where + ": " + ErrorText(e);
    return out;
  }
  const SftOptions& sft = opt_.sft;
  if (sft.max_tokens > 0 && static_cast<int64_t>(ex.ids.size()) > sft.max_tokens) {
    if (sft.overlong == Overlong::kDrop) {
      out.dropped_overlong = true;
      return out;
    }
    ex.ids.resize(static_cast<size_t>(sft.max_tokens));
    ex.mask.resize(static_cast<size_t>(sft.max_tokens));
    out.truncated = true;
  }
  out.dropped_untrained = std::find(ex.mask.begin(), ex.mask.end(), 1) == ex.mask.end();
  out.ids = std::move(ex.ids);
  out.mask = std::move(ex.mask);
  out.turns_without_eot = ex.turns_without_eot;
  return out;
}

EncodePool::EncodePool(int num_threads, const Encoder& encoder) : encoder_(encoder) {
  try {
    for (int i = 0; i < num_threads; ++i) threads_.emplace_back([this] { Work(); });
  } catch (const std::system_error& e) {
    // A joinable std::thread destroyed unjoined calls std::terminate: stop those started.
    const size_t started = threads_.size();
    Stop();
    throw std::runtime_error("cannot start " + std::to_string(num_threads) + " encoding threads (started " +
                             std::to_string(started) + "): " + e.what() + "; pass a smaller --threads");
  }
}

EncodePool::~EncodePool() { Stop(); }

void EncodePool::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    tasks_.clear();
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
}

std::future<EncodedBatch> EncodePool::Submit(Batch batch) {
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

void EncodePool::Work() {
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

}  // namespace ps::prep
