#include "tools/prep/encode_pool.h"

#include <utility>

namespace ps::prep {

EncodedBatch Encoder::EncodeBatch(Batch batch) const {
  EncodedBatch out;
  out.results.reserve(batch.docs.size());
  for (Document& d : batch.docs) {
    out.results.push_back(EncodeOne(d));
    d.text = std::string();
  }
  out.docs = std::move(batch.docs);
  return out;
}

Encoded Encoder::EncodeOne(const Document& d) const {
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
    out.ids = tok_.Encode(text);
  } catch (const std::exception& e) {
    out.error = DocumentLocation(d, opt_) + ": " + ErrorText(e);
    return out;
  }
  if (eot_) out.ids.push_back(*eot_);
  return out;
}

EncodePool::EncodePool(int num_threads, const Encoder& encoder) : encoder_(encoder) {
  for (int i = 0; i < num_threads; ++i) threads_.emplace_back([this] { Work(); });
}

EncodePool::~EncodePool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    tasks_.clear();
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
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
