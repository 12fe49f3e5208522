#include "comm/liveness.h"

#include <c10/util/Exception.h>

#include <vector>

namespace ps::comm {
namespace {

std::string Key(int rank) { return "ps/heartbeat/" + std::to_string(rank); }
// Set by a rank when one of its collectives failed: it stops later because of another
// rank, not on its own.
std::string FailedKey(int rank) { return "ps/failed/" + std::to_string(rank); }

std::string ErrorText(const std::exception& e) {
  if (auto* c = dynamic_cast<const c10::Error*>(&e)) return c->what_without_backtrace();
  return e.what();
}

}  // namespace

Heartbeat::Heartbeat(c10::intrusive_ptr<c10d::Store> store, int rank, int world_size, std::string store_address,
                     std::chrono::milliseconds interval)
    : store_(std::move(store)),
      rank_(rank),
      world_size_(world_size),
      store_address_(std::move(store_address)),
      interval_(interval) {
  store_->set(Key(rank_), std::vector<uint8_t>{'0'});  // before any collective can fail
  thread_ = std::thread([this] { Run(); });
}

Heartbeat::~Heartbeat() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Heartbeat::Run() {
  int64_t beats = 0;
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, interval_, [this] { return stop_; })) {
    const std::string value = std::to_string(++beats);
    try {
      store_->set(Key(rank_), std::vector<uint8_t>(value.begin(), value.end()));
    } catch (const std::exception&) {
      return;  // the store is gone (rank 0 exited); Diagnose() will say so
    }
  }
}

std::string Heartbeat::Diagnose() {
  auto read_all = [this] {
    std::vector<std::vector<uint8_t>> out;
    for (int r = 0; r < world_size_; ++r) out.push_back(r == rank_ ? std::vector<uint8_t>{} : store_->get(Key(r)));
    return out;
  };
  try {
    store_->set(FailedKey(rank_), std::vector<uint8_t>{'1'});
    const auto before = read_all();
    const auto wait = interval_ * 3;
    std::this_thread::sleep_for(wait);
    const auto after = read_all();
    // The ranks that went quiet: first those that did on their own (the cause), then
    // those that had a collective fail as this one did (and exited after reporting it).
    std::string dead, failed_too;
    for (int r = 0; r < world_size_; ++r) {
      if (r == rank_ || before[r] != after[r]) continue;
      std::string& list = store_->check({FailedKey(r)}) ? failed_too : dead;
      list += (list.empty() ? "" : ", ") + std::to_string(r);
    }
    if (dead.empty() && failed_too.empty()) {
      return "every rank still sends heartbeats (one may be stuck outside the collectives)";
    }
    const std::string seconds = std::to_string(std::chrono::duration<double>(wait).count()).substr(0, 3);
    if (dead.empty()) return "rank " + failed_too + " stopped answering after a collective failed there too";
    std::string out = "rank " + dead + " stopped answering (no heartbeat for " + seconds + " s: it exited or hangs)";
    if (!failed_too.empty()) out += "; rank " + failed_too + " stopped after a collective failed there too";
    return out;
  } catch (const std::exception& e) {
    return "rank 0 stopped answering: the rendezvous store it serves at " + store_address_ +
           " is unreachable (" + ErrorText(e) + ")";
  }
}

}  // namespace ps::comm
