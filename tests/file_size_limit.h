// Files that cannot grow past a limit, as on a disk that fills: RLIMIT_FSIZE with SIGXFSZ
// ignored, so write() fails with EFBIG. In a child process, so the limit does not reach
// the test process.
//   RunInChild(body): runs `body` in a child; its exit status (body's return value; 98
//     when it threw), or -1 when it did not exit normally (killed after 4 minutes).
//   LimitFileSize(bytes): sets the limit in the calling process (inside RunInChild's body,
//     after what must still be created without it).
//   RunWithFileSizeLimit(bytes, body): both, the limit first.
#pragma once

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <functional>

namespace ps::testing {

inline void LimitFileSize(long long limit_bytes) {
  signal(SIGXFSZ, SIG_IGN);
  const rlim_t limit = static_cast<rlim_t>(limit_bytes);
  struct rlimit rl = {limit, limit};
  setrlimit(RLIMIT_FSIZE, &rl);
}

inline int RunInChild(const std::function<int()>& body) {
  const pid_t child = fork();
  if (child < 0) return -1;
  if (child == 0) {
    alarm(240);  // a child that hangs is killed (the test then fails) before a medium test's timeout
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

inline int RunWithFileSizeLimit(long long limit_bytes, const std::function<int()>& body) {
  return RunInChild([&] {
    LimitFileSize(limit_bytes);
    return body();
  });
}

}  // namespace ps::testing
