#include "trainer/launcher.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <iostream>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

namespace ps::trainer {
namespace {

// The signal the launcher received, for the wait loop to forward (a handler cannot be
// handed an object; launcher process only).
std::atomic<int> g_forward_signal{0};

void OnSignal(int sig) { g_forward_signal.store(sig); }

int FreeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error(std::string("--nproc: socket() failed: ") + std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    close(fd);
    throw std::runtime_error(std::string("--nproc: no free port on 127.0.0.1: ") + std::strerror(errno));
  }
  close(fd);
  return ntohs(addr.sin_port);
}

int ExitStatusOf(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status); }


// In the child of fork(): rank `r` of `nproc` with the rendezvous variables set, exec'd
// as this binary with `args`. Never returns.
[[noreturn]] void ExecRank(int r, int nproc, const std::string& port, pid_t launcher,
                           const std::vector<std::string>& args) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != launcher) _exit(1);  // the launcher died before prctl
  setpgid(0, 0);  // a terminal's Ctrl-C reaches the launcher alone; it forwards once
  setenv("RANK", std::to_string(r).c_str(), 1);
  setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
  setenv("WORLD_SIZE", std::to_string(nproc).c_str(), 1);
  setenv("LOCAL_WORLD_SIZE", std::to_string(nproc).c_str(), 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", port.c_str(), 1);
  std::vector<std::string> argv_strings = {"ps_train"};
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_strings) argv.push_back(a.data());
  argv.push_back(nullptr);
  execv("/proc/self/exe", argv.data());
  std::cerr << "ps_train: error: --nproc: exec of /proc/self/exe failed: " << std::strerror(errno) << std::endl;
  _exit(127);
}

// The launched ranks, waited for: the first failure's status and rank; a failed rank
// (not a signal stop, status 42) takes the group down (SIGTERM, SIGKILL 15 s later).
class RankGroup {
 public:
  explicit RankGroup(std::vector<pid_t> pids) : pids_(std::move(pids)), running_(pids_.size(), true) {}

  // Until every rank has ended; returns the first failure's status (0: none).
  int Wait() {
    int live = static_cast<int>(pids_.size());
    while (live > 0) {
      if (const int sig = g_forward_signal.exchange(0)) Forward(sig);
      int status = 0;
      const pid_t pid = waitpid(-1, &status, WNOHANG);
      if (pid > 0) {
        if (Ended(pid, status)) --live;
        continue;
      }
      if (terminating_ && std::chrono::steady_clock::now() > kill_at_) SignalRunning(SIGKILL);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (failed_rank_ >= 0 && first_failure_ != 42 && !forwarded_) {
      std::cerr << "ps_train: error: --nproc " << pids_.size() << ": the group was stopped after rank " << failed_rank_
                << " failed (status " << first_failure_ << ")" << std::endl;
    }
    return first_failure_;
  }

 private:
  void SignalRunning(int sig) {
    for (size_t r = 0; r < pids_.size(); ++r) {
      if (running_[r]) kill(pids_[r], sig);
    }
  }
  void Forward(int sig) {
    forwarded_ = true;  // the ranks stop because of it: their statuses are not failures to report
    SignalRunning(sig);
  }
  // Rank of `pid` ended with `status`: recorded; whether it was one of ours still running.
  bool Ended(pid_t pid, int status) {
    for (size_t r = 0; r < pids_.size(); ++r) {
      if (pids_[r] != pid || !running_[r]) continue;
      running_[r] = false;
      const int code = ExitStatusOf(status);
      if (code != 0 && first_failure_ == 0) {
        first_failure_ = code;
        failed_rank_ = static_cast<int>(r);
      }
      // Said at once, so the line names the rank that died before the others report what
      // they saw. After a signal the launcher passed on, ranks ending by it are not news.
      if (code != 0 && code != 42 && !terminating_) {
        if (!forwarded_) {
          std::cerr << "ps_train: error: --nproc " << pids_.size() << ": rank " << r << " "
                    << (WIFSIGNALED(status) ? "was killed by signal " + std::to_string(WTERMSIG(status))
                                            : "exited with status " + std::to_string(code))
                    << "; stopping the other ranks" << std::endl;
        }
        terminating_ = true;
        kill_at_ = std::chrono::steady_clock::now() + std::chrono::seconds(15);
        SignalRunning(SIGTERM);
      }
      return true;
    }
    return false;
  }

  std::vector<pid_t> pids_;
  std::vector<bool> running_;
  int first_failure_ = 0, failed_rank_ = -1;
  std::chrono::steady_clock::time_point kill_at_{};
  bool terminating_ = false, forwarded_ = false;
};

}  // namespace

int LaunchLocalRanks(int nproc, const std::vector<std::string>& args) {
  if (nproc < 1) throw std::invalid_argument("--nproc must be >= 1");
  const std::string port = std::to_string(FreeLoopbackPort());
  std::vector<pid_t> pids;
  const pid_t launcher = getpid();
  // Caught before the first fork: a stop signal while the ranks start is forwarded to
  // them once they run (else it killed the launcher, the ranks went with it, exit 143, no
  // checkpoint). A rank's exec restores the default handlers.
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGUSR1}) sigaction(sig, &sa, nullptr);
  for (int r = 0; r < nproc; ++r) {
    const pid_t pid = fork();
    if (pid < 0) throw std::runtime_error(std::string("--nproc: fork failed: ") + std::strerror(errno));
    if (pid == 0) ExecRank(r, nproc, port, launcher, args);
    pids.push_back(pid);
  }
  return RankGroup(std::move(pids)).Wait();
}

}  // namespace ps::trainer
