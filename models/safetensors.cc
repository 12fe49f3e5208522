#include "models/safetensors.h"

#include <algorithm>
#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

namespace ps::models {
namespace {

struct DtypeName {
  const char* name;
  at::ScalarType type;
};

constexpr DtypeName kDtypes[] = {
    {"F64", at::kDouble}, {"F32", at::kFloat}, {"F16", at::kHalf},  {"BF16", at::kBFloat16},
    {"I64", at::kLong},   {"I32", at::kInt},   {"I16", at::kShort}, {"I8", at::kChar},
    {"U8", at::kByte},    {"BOOL", at::kBool},
};

at::ScalarType ParseDtype(const std::string& name, const std::string& where) {
  for (const auto& d : kDtypes) {
    if (name == d.name) return d.type;
  }
  TORCH_CHECK(false, where, ": unsupported dtype '", name, "'");
}

const char* DtypeString(at::ScalarType type) {
  for (const auto& d : kDtypes) {
    if (type == d.type) return d.name;
  }
  TORCH_CHECK(false, "safetensors: unsupported tensor dtype ", type);
}

}  // namespace

TensorMap LoadSafetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  TORCH_CHECK(in.good(), path, ": cannot open");
  std::vector<char> bytes(static_cast<size_t>(in.tellg()));
  in.seekg(0);
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  TORCH_CHECK(in.good() || bytes.empty(), path, ": read failed");
  return ParseSafetensors(path, bytes);
}

namespace {

// One tensor of a safetensors file: where its bytes are, relative to the file start.
struct Entry {
  at::ScalarType type;
  std::vector<int64_t> shape;
  int64_t offset_bytes;  // from the start of the file
  int64_t bytes;
};

// `field` of a header entry: a list of integers (a fraction would be cut silently).
std::vector<int64_t> Integers(const nlohmann::json& field, const std::string& where, const char* name) {
  TORCH_CHECK(field.is_array(), where, ": ", name, " is ", field.dump(), ", not a list of integers");
  for (const auto& x : field) {
    TORCH_CHECK(x.is_number_integer(), where, ": ", name, " holds ", x.dump(), ", not an integer");
  }
  return field.get<std::vector<int64_t>>();
}

// Parses and checks the header of the `file_bytes` bytes at `file`; entries by name.
std::map<std::string, Entry> ParseEntries(const std::string& path, const char* file, int64_t file_bytes) {
  TORCH_CHECK(file_bytes >= 8, path, ": too short for a safetensors header (", file_bytes,
              " bytes)");
  uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, file, 8);
  TORCH_CHECK(header_bytes <= static_cast<uint64_t>(file_bytes - 8), path, ": header length ",
              header_bytes, " exceeds the file size ", file_bytes);
  nlohmann::json meta;
  try {
    meta = nlohmann::json::parse(file + 8, file + 8 + header_bytes);
  } catch (const std::exception& e) {
    TORCH_CHECK(false, path, ": malformed JSON header: ", e.what());
  }
  TORCH_CHECK(meta.is_object(), path, ": header is not a JSON object");
  const int64_t data_start = 8 + static_cast<int64_t>(header_bytes);
  const int64_t data_bytes = file_bytes - data_start;

  std::map<std::string, Entry> out;
  for (auto it = meta.begin(); it != meta.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    const std::string where = path + ": tensor '" + it.key() + "'";
    const auto& v = it.value();
    TORCH_CHECK(v.is_object() && v.contains("dtype") && v.contains("shape") &&
                    v.contains("data_offsets"),
                where, ": needs dtype, shape and data_offsets");
    Entry e;
    try {
      e.type = ParseDtype(v["dtype"].get<std::string>(), where);
      e.shape = Integers(v["shape"], where, "shape");
      const auto offsets = Integers(v["data_offsets"], where, "data_offsets");
      TORCH_CHECK(offsets.size() == 2 && offsets[0] >= 0 && offsets[0] <= offsets[1] &&
                      offsets[1] <= data_bytes,
                  where, ": data_offsets out of range of ", data_bytes, " data bytes");
      e.offset_bytes = data_start + offsets[0];
      e.bytes = offsets[1] - offsets[0];
    } catch (const nlohmann::json::exception& ex) {
      TORCH_CHECK(false, where, ": malformed entry: ", ex.what());
    }
    int64_t numel = 1;
    for (int64_t d : e.shape) {
      TORCH_CHECK(d >= 0, where, ": negative dimension");
      TORCH_CHECK(d == 0 || numel <= data_bytes / d, where, ": shape larger than the file");
      numel *= d;
    }
    const int64_t bytes = numel * static_cast<int64_t>(c10::elementSize(e.type));
    TORCH_CHECK(e.bytes == bytes, where, ": shape needs ", bytes,
                " bytes but data_offsets span ", e.bytes);
    out.emplace(it.key(), std::move(e));
  }
  // As the format requires: the tensors' byte ranges tile the data exactly, so no two
  // tensors share bytes and no bytes hide between them.
  std::vector<std::pair<int64_t, int64_t>> ranges;  // (start, end) from the data start
  for (const auto& [name, e] : out) ranges.emplace_back(e.offset_bytes - data_start, e.offset_bytes - data_start + e.bytes);
  std::sort(ranges.begin(), ranges.end());
  int64_t covered = 0;
  for (const auto& [begin, end] : ranges) {
    TORCH_CHECK(begin >= covered, path, ": two tensors share bytes ", begin, " to ", std::min(end, covered),
                " of the data (data_offsets overlap)");
    TORCH_CHECK(begin == covered, path, ": bytes ", covered, " to ", begin, " of the data belong to no tensor");
    covered = end;
  }
  TORCH_CHECK(covered == data_bytes, path, ": the tensors end at byte ", covered, " of ", data_bytes, " data bytes");
  return out;
}

// A read-only file mapped copy-on-write (writes through a tensor view change only this
// process's pages); unmapped when the last view is gone.
class Mapping {
 public:
  explicit Mapping(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    TORCH_CHECK(fd >= 0, path, ": cannot open: ", std::strerror(errno));
    struct stat st {};
    const bool ok = ::fstat(fd, &st) == 0;
    const int stat_errno = errno;
    if (!ok || !S_ISREG(st.st_mode)) ::close(fd);
    TORCH_CHECK(ok, path, ": cannot stat: ", std::strerror(stat_errno));
    TORCH_CHECK(S_ISREG(st.st_mode), path, ": is not a regular file");
    bytes_ = st.st_size;
    if (bytes_ > 0) {
      void* p = ::mmap(nullptr, static_cast<size_t>(bytes_), PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
      const int map_errno = errno;
      ::close(fd);
      TORCH_CHECK(p != MAP_FAILED, path, ": mmap failed: ", std::strerror(map_errno));
      data_ = static_cast<char*>(p);
    } else {
      ::close(fd);
    }
  }
  ~Mapping() {
    if (data_) ::munmap(data_, static_cast<size_t>(bytes_));
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  char* data() const { return data_; }
  int64_t bytes() const { return bytes_; }

 private:
  char* data_ = nullptr;
  int64_t bytes_ = 0;
};

}  // namespace

TensorMap ParseSafetensors(const std::string& path, const std::vector<char>& file) {
  TensorMap out;
  for (const auto& [name, e] : ParseEntries(path, file.data(), static_cast<int64_t>(file.size()))) {
    auto t = at::empty(e.shape, at::TensorOptions().dtype(e.type));
    if (e.bytes > 0) std::memcpy(t.data_ptr(), file.data() + e.offset_bytes, e.bytes);
    out.emplace(name, t);
  }
  return out;
}

TensorMap MapSafetensors(const std::string& path) {
  auto mapping = std::make_shared<Mapping>(path);
  TensorMap out;
  for (const auto& [name, e] : ParseEntries(path, mapping->data(), mapping->bytes())) {
    if (e.bytes == 0) {
      out.emplace(name, at::empty(e.shape, at::TensorOptions().dtype(e.type)));
      continue;
    }
    const at::TensorOptions options = at::TensorOptions().dtype(e.type);
    if (e.offset_bytes % static_cast<int64_t>(c10::elementSize(e.type)) != 0) {
      // Data packed after a tensor of odd byte size: not a valid view of its type, so a
      // copy of its own (the format does not require alignment).
      at::Tensor t = at::empty(e.shape, options);
      std::memcpy(t.data_ptr(), mapping->data() + e.offset_bytes, e.bytes);
      out.emplace(name, t);
      continue;
    }
    out.emplace(name, at::from_blob(mapping->data() + e.offset_bytes, e.shape, [mapping](void*) {}, options));
  }
  return out;
}

std::string SafetensorsHeader(const TensorMap& tensors) {
  std::vector<std::string> order;
  for (const auto& item : tensors) order.push_back(item.first);
  return SafetensorsHeader(tensors, order);
}

std::string SafetensorsHeader(const TensorMap& tensors, const std::vector<std::string>& data_order) {
  TORCH_CHECK(data_order.size() == tensors.size(), "SafetensorsHeader: an order of ", data_order.size(),
              " names for ", tensors.size(), " tensors");
  nlohmann::json meta = nlohmann::json::object();
  int64_t offset = 0;
  for (const std::string& name : data_order) {
    const auto it = tensors.find(name);
    TORCH_CHECK(it != tensors.end() && !meta.contains(name), "SafetensorsHeader: '", name,
                "' is not a tensor of the map, or is named twice");
    const at::Tensor& tensor = it->second;
    const int64_t bytes = tensor.numel() * static_cast<int64_t>(tensor.element_size());
    meta[name] = {{"dtype", DtypeString(tensor.scalar_type())},
                  {"shape", tensor.sizes().vec()},
                  {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string header = meta.dump();
  header.resize((header.size() + 7) / 8 * 8, ' ');  // 8-byte aligned data, as HF writes
  return header;
}

namespace {

// The dtype `t` is written in: `float_dtype` for a floating tensor when given.
at::ScalarType WrittenDtype(const at::Tensor& t, std::optional<at::ScalarType> float_dtype) {
  return float_dtype && at::isFloatingType(t.scalar_type()) ? *float_dtype : t.scalar_type();
}

}  // namespace

void SaveSafetensors(const std::string& path, const TensorMap& tensors, std::optional<at::ScalarType> float_dtype) {
  // The header from shapes and written dtypes alone (meta tensors): each tensor is
  // converted only when its turn to be written comes, so at most one copy exists.
  TensorMap layout;
  for (const auto& [name, tensor] : tensors) {
    layout.emplace(name, at::empty(tensor.sizes(), at::TensorOptions()
                                                       .dtype(WrittenDtype(tensor, float_dtype))
                                                       .device(at::kMeta)));
  }
  const std::string header = SafetensorsHeader(layout);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    TORCH_CHECK(out.good(), tmp, ": cannot open for writing");
    const uint64_t header_bytes = header.size();
    out.write(reinterpret_cast<const char*>(&header_bytes), 8);
    out.write(header.data(), static_cast<std::streamsize>(header.size()));
    for (const auto& [name, tensor] : tensors) {
      const at::Tensor t = tensor.detach().to(at::kCPU, WrittenDtype(tensor, float_dtype)).contiguous();
      out.write(static_cast<const char*>(t.data_ptr()),
                static_cast<std::streamsize>(t.numel() * t.element_size()));
    }
    TORCH_CHECK(out.good(), tmp, ": write failed");
  }
  TORCH_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, path, ": rename from ", tmp,
              " failed");
}

std::vector<std::string> SaveShardedSafetensors(const std::string& folder, const TensorMap& tensors,
                                                int64_t max_shard_bytes, std::optional<at::ScalarType> float_dtype) {
  std::vector<TensorMap> shards(1);
  int64_t shard_bytes = 0, total_bytes = 0;
  for (const auto& [name, t] : tensors) {
    const int64_t bytes = t.numel() * static_cast<int64_t>(c10::elementSize(WrittenDtype(t, float_dtype)));
    if (!shards.back().empty() && shard_bytes + bytes > max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().emplace(name, t);
    shard_bytes += bytes;
    total_bytes += bytes;
  }
  const std::string dir = folder.empty() || folder.back() == '/' ? folder : folder + "/";
  if (shards.size() == 1) {
    SaveSafetensors(dir + "model.safetensors", shards[0], float_dtype);
    return {"model.safetensors"};
  }
  std::vector<std::string> written;
  nlohmann::json index = {{"metadata", {{"total_size", total_bytes}}}, {"weight_map", nlohmann::json::object()}};
  const int n = static_cast<int>(shards.size());
  for (int i = 0; i < n; ++i) {
    char name[64];
    std::snprintf(name, sizeof(name), "model-%05d-of-%05d.safetensors", i + 1, n);
    SaveSafetensors(dir + name, shards[i], float_dtype);
    for (const auto& [tensor_name, t] : shards[i]) index["weight_map"][tensor_name] = name;
    written.push_back(name);
  }
  const std::string index_path = dir + "model.safetensors.index.json";
  {
    std::ofstream out(index_path + ".tmp", std::ios::trunc);
    out << index.dump(2) << "\n";
    TORCH_CHECK(out.good(), index_path, ".tmp: write failed");
  }
  TORCH_CHECK(std::rename((index_path + ".tmp").c_str(), index_path.c_str()) == 0, index_path, ": rename failed");
  written.push_back("model.safetensors.index.json");
  return written;
}

}  // namespace ps::models
