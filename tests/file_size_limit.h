// RunWithFileSizeLimit(): runs `body` in a child process whose files cannot grow past
// `limit_bytes` (RLIMIT_FSIZE, SIGXFSZ ignored: write() fails with EFBIG, as on a disk
// that fills), so the limit does not reach the test process. Returns the child's exit
// status, or -1 when it did not exit normally.
#pragma once

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <functional>

namespace ps::testing {

inline int RunWithFileSizeLimit(long long limit_bytes, const std::function<int()>& body) {
  const pid_t child = fork();
  if (child < 0) return -1;
  if (child == 0) {
    signal(SIGXFSZ, SIG_IGN);
    const rlim_t limit = static_cast<rlim_t>(limit_bytes);
    struct rlimit rl = {limit, limit};
    setrlimit(RLIMIT_FSIZE, &rl);
    int code = 99;
    try {
      code = body();
    } catch (...) {
      code = 98;
    }
    _exit(code);
  }
  int status = 0;
  waitpid(child, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace ps::testing
