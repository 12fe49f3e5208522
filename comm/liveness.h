// Heartbeat: names the rank that died or hangs when a collective fails. Every rank's
// heartbeat thread bumps its counter "ps/heartbeat/<rank>" in the rendezvous store once
// a second; after a failure, Diagnose() reads all counters twice, a few beats apart,
// and names the ranks whose counters stood still. If the store itself is gone, rank 0
// (which serves it) has exited. Owned by a communicator; Diagnose() from any thread.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace ps::comm {

class Heartbeat {
 public:
  Heartbeat(c10::intrusive_ptr<c10d::Store> store, int rank, int world_size, std::string store_address,
            std::chrono::milliseconds interval = std::chrono::milliseconds(1000));
  ~Heartbeat();  // stops the thread
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  // "rank 2 stopped answering (no heartbeat for 3.0 s: it exited or hangs)", or what is
  // known otherwise. Blocks about 3 heartbeat intervals. Never throws.
  std::string Diagnose();

 private:
  void Run();

  c10::intrusive_ptr<c10d::Store> store_;
  int rank_, world_size_;
  std::string store_address_;
  std::chrono::milliseconds interval_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace ps::comm
