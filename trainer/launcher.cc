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

}  // namespace

int LaunchLocalRanks(int nproc, const std::vector<std::string>& args) {
  if (nproc < 1) throw std::invalid_argument("--nproc must be >= 1");
  const std::string port = std::to_string(FreeLoopbackPort());
  std::vector<pid_t> pids;
  const pid_t launcher = getpid();
  for (int r = 0; r < nproc; ++r) {
    const pid_t pid = fork();
    if (pid < 0) throw std::runtime_error(std::string("--nproc: fork failed: ") + std::strerror(errno));
    if (pid == 0) {
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
    pids.push_back(pid);
  }
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGUSR1}) sigaction(sig, &sa, nullptr);

  std::vector<bool> running(nproc, true);
  int live = nproc, first_failure = 0, failed_rank = -1;
  std::chrono::steady_clock::time_point kill_at{};
  bool terminating = false, forwarded = false;
  while (live > 0) {
    if (const int sig = g_forward_signal.exchange(0)) {
      forwarded = true;  // the ranks stop because of it: their statuses are not failures to report
      for (int r = 0; r < nproc; ++r) {
        if (running[r]) kill(pids[r], sig);
      }
    }
    int status = 0;
    const pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      for (int r = 0; r < nproc; ++r) {
        if (pids[r] != pid || !running[r]) continue;
        running[r] = false;
        --live;
        const int code = ExitStatusOf(status);
        if (code != 0 && first_failure == 0) {
          first_failure = code;
          failed_rank = r;
        }
        // A failed rank (not a signal stop, 42) takes the group down; said at once, so
        // the line names the rank that died before the others report what they saw.
        // After a signal the launcher passed on, ranks ending by it are not news.
        if (code != 0 && code != 42 && !terminating) {
          if (!forwarded) {
            std::cerr << "ps_train: error: --nproc " << nproc << ": rank " << r << " "
                      << (WIFSIGNALED(status) ? "was killed by signal " + std::to_string(WTERMSIG(status))
                                              : "exited with status " + std::to_string(code))
                      << "; stopping the other ranks" << std::endl;
          }
          terminating = true;
          kill_at = std::chrono::steady_clock::now() + std::chrono::seconds(15);
          for (int q = 0; q < nproc; ++q) {
            if (running[q]) kill(pids[q], SIGTERM);
          }
        }
      }
      continue;
    }
    if (terminating && std::chrono::steady_clock::now() > kill_at) {
      for (int q = 0; q < nproc; ++q) {
        if (running[q]) kill(pids[q], SIGKILL);
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (failed_rank >= 0 && first_failure != 42 && !forwarded) {
    std::cerr << "ps_train: error: --nproc " << nproc << ": the group was stopped after rank " << failed_rank
              << " failed (status " << first_failure << ")" << std::endl;
  }
  return first_failure;
}

}  // namespace ps::trainer
