#include "trainer/io/run_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "trainer/config/config_loader.h"

namespace ps::trainer {
namespace {

std::string HostName() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "unknown host";
  return name;
}

// What the holder wrote into the lock file ("pid 123 on host node7"), or a note.
std::string HolderOf(int fd) {
  char text[512] = {};
  const ssize_t n = ::pread(fd, text, sizeof(text) - 1, 0);
  if (n <= 0) return "a process that has not yet written its pid";
  std::string holder(text, static_cast<size_t>(n));
  while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
  return holder;
}

}  // namespace

std::string LockFilePath(const std::string& folder) {
  return (std::filesystem::path(folder) / ".ps_train.lock").string();
}

FolderLock::FolderLock(const std::string& folder, const std::string& key) : path_(LockFilePath(folder)) {
  std::error_code ec;
  std::filesystem::create_directories(folder, ec);
  if (ec) throw ConfigError(key + " " + folder + ": cannot create the folder (" + ec.message() + ")");
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw std::runtime_error(path_ + ": cannot open the run's lock file: " + std::strerror(errno));
  int rc;
  while ((rc = ::flock(fd_, LOCK_EX | LOCK_NB)) != 0 && errno == EINTR) {
  }
  if (rc != 0) {
    const int err = errno;
    const std::string holder = err == EWOULDBLOCK ? HolderOf(fd_) : "";
    ::close(fd_);
    fd_ = -1;
    if (err == EWOULDBLOCK) {
      throw ConfigError(key + " " + folder + " is in use by another ps_train (" + holder + ", lock " + path_ +
                        "): one run per folder; wait for it to end, stop it, or choose another " + key);
    }
    throw std::runtime_error(path_ + ": cannot lock: " + std::strerror(err));
  }
  // The holder, for the message of the next claimant; written under the lock.
  const std::string me = "pid " + std::to_string(::getpid()) + " on host " + HostName() + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, me.data(), me.size(), 0) != static_cast<ssize_t>(me.size())) {
    // Only the message would lack the holder; the lock itself is held.
  }
}

FolderLock::~FolderLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the last descriptor releases the flock
}

}  // namespace ps::trainer
