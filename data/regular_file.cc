#include "data/regular_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "data/data_error.h"

namespace ps::data {
namespace {

std::string KeySuffix(const std::string& key) { return key.empty() ? "" : " (" + key + ")"; }

// What a non-regular file is, for messages.
const char* KindOf(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

void CheckMode(const std::string& path, const std::string& key, mode_t mode) {
  PS_DATA_CHECK(S_ISREG(mode), path, ": is ", KindOf(mode), ", not a regular file", KeySuffix(key));
}

}  // namespace

void CheckRegularFile(const std::string& path, const std::string& key) {
  struct stat st {};
  PS_DATA_CHECK(::stat(path.c_str(), &st) == 0, path, ": cannot open: ", std::strerror(errno), KeySuffix(key));
  CheckMode(path, key, st.st_mode);
}

int OpenRegularFile(const std::string& path, const std::string& key) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  PS_DATA_CHECK(fd >= 0, path, ": cannot open: ", std::strerror(errno), KeySuffix(key));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    PS_DATA_CHECK(false, path, ": cannot stat: ", std::strerror(err), KeySuffix(key));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    CheckMode(path, key, st.st_mode);
  }
  // Regular files ignore O_NONBLOCK for reads; clear it anyway so the flag means nothing later.
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

}  // namespace ps::data
