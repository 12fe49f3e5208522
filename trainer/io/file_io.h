// Checked file output for checkpoints and metrics. Every write is checked: a failure
// (disk full, quota, I/O error) throws std::runtime_error naming the file and the
// system's reason, so no run ends with exit 0 after losing data. Files that must
// survive a crash are fsynced, and replaced by rename (POSIX: atomic within a folder).
// One thread per object.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace ps::trainer {

// Incremental SHA-256 (OpenSSL's libcrypto).
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void Update(const void* data, size_t bytes);
  std::string HexDigest();  // lower-case hex; ends the hash

 private:
  struct Context;
  std::unique_ptr<Context> ctx_;
};

class CheckedFile {
 public:
  enum class Mode { kTruncate, kAppend };
  CheckedFile(const std::string& path, Mode mode);  // throws naming `path`
  ~CheckedFile();                                   // closes (errors ignored: call Close())
  CheckedFile(const CheckedFile&) = delete;
  CheckedFile& operator=(const CheckedFile&) = delete;

  void Write(const void* data, size_t bytes);  // all of it, or throws
  void Write(const std::string& text) { Write(text.data(), text.size()); }
  // One record (a metrics line, an event): all of it, or throws with the file cut back
  // to its length before the call, so a failed write (disk full) leaves no torn record.
  void WriteRecord(const std::string& record);
  void Sync();                                 // fsync: the bytes are on the disk
  void Close();                                // checked close
  int64_t bytes_written() const { return bytes_written_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
  int64_t bytes_written_ = 0;
};

// fsync of a folder: a rename or a new file in it is on the disk.
void SyncDirectory(const std::string& path);
// fsync of a file already written and closed (by another writer); errors as above.
void SyncFile(const std::string& path);
// Writes `text` to `path` through `path`.tmp, fsync and rename: readers see the old
// file or the new one, never a part.
void WriteFileAtomically(const std::string& path, const std::string& text);
// A failed system call on a file: the message names the file, the call and the error;
// `error_number` is the errno (ENOENT: the file does not exist).
class FileIoError : public std::runtime_error {
 public:
  FileIoError(const std::string& what, int error_number) : std::runtime_error(what), error_number_(error_number) {}
  int error_number() const { return error_number_; }

 private:
  int error_number_;
};

// The whole file; throws FileIoError naming it when it cannot be read.
std::vector<char> ReadWholeFile(const std::string& path);
// The file's SHA-256 (lower-case hex) and size, read a few MiB at a time (no copy of the
// whole file in memory); throws FileIoError naming it when it cannot be read.
std::string FileSha256(const std::string& path, int64_t* bytes);

}  // namespace ps::trainer
