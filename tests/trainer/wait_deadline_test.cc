// WaitDeadline ends a process stuck in a wait: at the deadline (exit 1) or on a stop
// signal (128 + signal), promptly, naming the wait; disarmed, it does nothing. Each case
// runs in a child process, since ending the process is the point.
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <functional>
#include <iterator>
#include <thread>

#include "trainer/wait_deadline.h"
#include "tests/catch.h"
#include "tests/temp_dir.h"

namespace ps::trainer {
namespace {

using Clock = std::chrono::steady_clock;

struct Outcome {
  int status = -1;     // exit status, -1 when killed
  double seconds = 0;  // until the child ended
  std::string stderr_text;
};

// Runs `body` in a child whose stderr goes to a file; the child exits 0 if `body` returns.
Outcome InChild(const std::function<void()>& body) {
  const std::string err = testing::TempDir() + "/wait_deadline_stderr.txt";
  const auto start = Clock::now();
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    if (!freopen(err.c_str(), "w", stderr)) _exit(97);
    body();
    _exit(0);
  }
  int status = 0;
  waitpid(child, &status, 0);
  Outcome out;
  out.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  out.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream in(err);
  out.stderr_text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return out;
}

TEST_CASE("a wait past its deadline ends the process with exit 1, naming the wait", "[wait_deadline]") {
  const Outcome o = InChild([] {
    WaitDeadline deadline("rank 1/2: rendezvous at 127.0.0.1:1", std::chrono::milliseconds(300), nullptr);
    std::this_thread::sleep_for(std::chrono::seconds(20));  // a wait that never ends by itself
  });
  CHECK(o.status == 1);
  CHECK(o.seconds < 5);
  CHECK(o.stderr_text.find("rank 1/2: rendezvous at 127.0.0.1:1: no answer within 0.3") != std::string::npos);
}

TEST_CASE("a stop signal ends the wait at once with 128 + signal", "[wait_deadline]") {
  const Outcome o = InChild([] {
    std::atomic<int> stop{0};
    WaitDeadline deadline("rendezvous", std::chrono::seconds(60), &stop);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    stop = 15;  // what the SIGTERM handler stores
    std::this_thread::sleep_for(std::chrono::seconds(20));
  });
  CHECK(o.status == 128 + 15);
  CHECK(o.seconds < 5);
  CHECK(o.stderr_text.find("rendezvous: stopped by signal 15") != std::string::npos);
}

TEST_CASE("a wait that ends in time: nothing happens", "[wait_deadline]") {
  const Outcome o = InChild([] {
    { WaitDeadline deadline("rendezvous", std::chrono::milliseconds(200), nullptr); }
    std::this_thread::sleep_for(std::chrono::milliseconds(400));  // past the deadline, disarmed
  });
  CHECK(o.status == 0);
  CHECK(o.stderr_text.empty());
}

}  // namespace
}  // namespace ps::trainer
