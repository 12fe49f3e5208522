#include "trainer/io/file_io.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <vector>

namespace ps::trainer {
namespace {

[[noreturn]] void Fail(const std::string& path, const char* what, int err) {
  throw FileIoError(path + ": " + what + " failed: " + std::strerror(err), err);
}

}  // namespace

struct Sha256::Context {
  EVP_MD_CTX* md = nullptr;
};

Sha256::Sha256() : ctx_(std::make_unique<Context>()) {
  ctx_->md = EVP_MD_CTX_new();
  if (!ctx_->md || EVP_DigestInit_ex(ctx_->md, EVP_sha256(), nullptr) != 1) {
    throw std::runtime_error("SHA-256: OpenSSL initialisation failed");
  }
}

Sha256::~Sha256() { EVP_MD_CTX_free(ctx_->md); }

void Sha256::Update(const void* data, size_t bytes) {
  if (bytes > 0 && EVP_DigestUpdate(ctx_->md, data, bytes) != 1) throw std::runtime_error("SHA-256: update failed");
}

std::string Sha256::HexDigest() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (EVP_DigestFinal_ex(ctx_->md, digest, &length) != 1) throw std::runtime_error("SHA-256: final failed");
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < length; ++i) {
    out += kHex[digest[i] >> 4];
    out += kHex[digest[i] & 15];
  }
  return out;
}

CheckedFile::CheckedFile(const std::string& path, Mode mode) : path_(path) {
  const int flags = O_WRONLY | O_CREAT | O_CLOEXEC | (mode == Mode::kAppend ? O_APPEND : O_TRUNC);
  fd_ = ::open(path.c_str(), flags, 0644);
  if (fd_ < 0) Fail(path, "open for writing", errno);
}

CheckedFile::~CheckedFile() {
  if (fd_ >= 0) ::close(fd_);
}

void CheckedFile::Write(const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd_, p, bytes);
    if (n < 0) {
      if (errno == EINTR) continue;
      Fail(path_, "write", errno);
    }
    if (n == 0) Fail(path_, "write", ENOSPC);
    p += n;
    bytes -= static_cast<size_t>(n);
    bytes_written_ += n;
  }
}

void CheckedFile::WriteRecord(const std::string& record) {
  const off_t before = ::lseek(fd_, 0, SEEK_END);
  if (before < 0) Fail(path_, "seek", errno);
  const int64_t written_before = bytes_written_;
  try {
    Write(record.data(), record.size());
  } catch (...) {
    // The part that went out is taken back; the file ends at its last whole record.
    while (::ftruncate(fd_, before) != 0 && errno == EINTR) {
    }
    ::lseek(fd_, before, SEEK_SET);  // a file not opened for appending writes here next
    bytes_written_ = written_before;
    throw;
  }
}

void CheckedFile::Sync() {
  if (::fsync(fd_) != 0) Fail(path_, "fsync", errno);
}

void CheckedFile::Close() {
  const int fd = fd_;
  fd_ = -1;
  if (fd >= 0 && ::close(fd) != 0) Fail(path_, "close", errno);
}

void SyncDirectory(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) Fail(path, "open folder", errno);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0 && err != EINVAL) Fail(path, "fsync folder", err);  // EINVAL: the file system cannot
}

void SyncFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) Fail(path, "open", errno);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0 && err != EINVAL) Fail(path, "fsync", err);
}

void WriteFileAtomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    CheckedFile out(tmp, CheckedFile::Mode::kTruncate);
    out.Write(text);
    out.Sync();
    out.Close();
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) Fail(path, "rename from .tmp", errno);
  const auto slash = path.find_last_of('/');
  SyncDirectory(slash == std::string::npos ? "." : path.substr(0, slash == 0 ? 1 : slash));
}

namespace {

// Reads `path` from start to end a few MiB at a time, handing each piece to `consume`.
void ReadPieces(const std::string& path, const std::function<void(const char* data, size_t bytes)>& consume) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) Fail(path, "open", errno);
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};  // also when `consume` or the buffer throws
  std::vector<char> buffer(1 << 22);
  while (true) {
    const ssize_t n = ::read(fd, buffer.data(), buffer.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      Fail(path, "read", errno);
    }
    if (n == 0) break;
    consume(buffer.data(), static_cast<size_t>(n));
  }
}

}  // namespace

std::vector<char> ReadWholeFile(const std::string& path) {
  std::vector<char> out;
  ReadPieces(path, [&](const char* data, size_t bytes) { out.insert(out.end(), data, data + bytes); });
  return out;
}

std::string FileSha256(const std::string& path, int64_t* bytes) {
  Sha256 hash;
  *bytes = 0;
  ReadPieces(path, [&](const char* data, size_t n) {
    hash.Update(data, n);
    *bytes += static_cast<int64_t>(n);
  });
  return hash.HexDigest();
}

}  // namespace ps::trainer
