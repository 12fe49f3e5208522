#include "data/mapped_file.h"

#include <c10/util/Exception.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "data/data_error.h"
#include "data/regular_file.h"

namespace ps::data {

std::string KeySuffix(const std::string& path_key) { return path_key.empty() ? "" : " (" + path_key + ")"; }

MappedFile::MappedFile(const std::string& path, const std::string& path_key) : path_(path) {
  const std::string key = KeySuffix(path_key);
  const int fd = OpenRegularFile(path, path_key);  // never blocks on a FIFO
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    PS_DATA_CHECK(false, path, ": cannot stat: ", std::strerror(err), key);
  }
  bytes_ = st.st_size;
  if (bytes_ == 0) {
    ::close(fd);
    PS_DATA_CHECK(false, path, ": is empty (0 bytes, no tokens)", key);
  }
  void* p = ::mmap(nullptr, bytes_, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);
  TORCH_CHECK(p != MAP_FAILED, path, ": mmap failed: ", std::strerror(err));
  data_ = static_cast<const uint8_t*>(p);
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), bytes_);
}

}  // namespace ps::data
