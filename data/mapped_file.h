// MappedFile: a read-only memory map of one whole, non-empty regular data file (token
// files, Megatron .bin/.idx, the .mask of chat data), unmapped on destruction. Paths
// that cannot be data files (missing, a directory, a FIFO, a device, empty) are
// DataErrors naming the path and, when given, its config key. Const methods may be
// called from any thread.
#pragma once

#include <cstdint>
#include <string>

namespace ps::data {

class MappedFile {
 public:
  // `path_key` ("data.train_path", ...) is named in the errors as " (key)"; "" names none.
  MappedFile(const std::string& path, const std::string& path_key);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  int64_t bytes() const { return bytes_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  int64_t bytes_ = 0;
};

// " (data.train_path)" when `path_key` is set, else "": the suffix data/ errors name keys by.
std::string KeySuffix(const std::string& path_key);

}  // namespace ps::data
