// FolderLock: one owner per run folder. An exclusive advisory lock (flock) on
// <folder>/.ps_train.lock, held while the object lives; the kernel releases it when the
// process ends in any way (exit, crash, SIGKILL), so no lock is ever left stale. The
// file names the holder (pid and host) for the message a second claimant gets. A lock
// on a folder on NFS is taken by the server (Linux maps flock to an NFS lock).
// Training thread, before anything in the folder is read or written.
#pragma once

#include <string>

namespace ps::trainer {

class FolderLock {
 public:
  // Creates `folder` if needed and takes its lock; throws ConfigError naming `key` (the
  // config key of the folder), the folder and the holder's pid and host when another
  // process holds it, std::runtime_error naming the file when it cannot be made.
  FolderLock(const std::string& folder, const std::string& key);
  ~FolderLock();  // releases the lock (the file stays: removing it would race a new owner)
  FolderLock(const FolderLock&) = delete;
  FolderLock& operator=(const FolderLock&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

// The lock file of `folder`.
std::string LockFilePath(const std::string& folder);

}  // namespace ps::trainer
