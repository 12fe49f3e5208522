// safetensors: round trip of several dtypes, and clear errors on corrupt files.
#include <ATen/ATen.h>

#include <cstdio>
#include <fstream>

#include "models/safetensors.h"
#include "tests/catch.h"

namespace ps::models {
namespace {

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name;
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string WithHeader(const std::string& json, const std::string& data) {
  std::string out(8, '\0');
  const uint64_t n = json.size();
  std::memcpy(out.data(), &n, 8);
  return out + json + data;
}

// `out` has the tensors of `in`: names, dtypes, shapes and values.
void CheckSame(const TensorMap& out, const TensorMap& in) {
  REQUIRE(out.size() == in.size());
  for (const auto& [name, t] : in) {
    INFO(name);
    CHECK(out.at(name).scalar_type() == t.scalar_type());
    CHECK(at::equal(out.at(name), t));
  }
}

TEST_CASE("round trip keeps names, shapes, dtypes and values", "[safetensors]") {
  TensorMap in;
  in["a.weight"] = at::randn({3, 4});
  in["b"] = at::randn({5}).to(at::kHalf);
  in["c"] = at::randn({2, 2}).to(at::kBFloat16);
  in["ids"] = at::arange(7, at::kLong);
  in["empty"] = at::zeros({0, 3});
  const std::string path = TempPath("round.safetensors");
  SaveSafetensors(path, in);
  CheckSame(LoadSafetensors(path), in);
}

TEST_CASE("mapped: views of the file, and a copy of a tensor packed after odd bytes", "[safetensors]") {
  TensorMap in;
  in["a.codes"] = at::arange(3, at::kByte);              // 3 bytes: the next tensor starts at byte 3
  in["b.moments"] = at::randn({5});                     // fp32 at an offset no fp32 view may take
  in["c.moments"] = at::randn({4}).to(at::kBFloat16);  // at 23: odd again
  const std::string path = TempPath("packed.safetensors");
  SaveSafetensors(path, in);
  CheckSame(MapSafetensors(path), in);
}

TEST_CASE("corrupt files are rejected with the file and tensor named", "[safetensors]") {
  const std::string path = TempPath("bad.safetensors");
  WriteBytes(path, "abc");
  CHECK_THROWS_WITH(LoadSafetensors(path), Catch::Contains(path + ": too short"));
  WriteBytes(path, WithHeader("{\"x\": ", ""));
  CHECK_THROWS_WITH(LoadSafetensors(path), Catch::Contains("malformed JSON header"));
  std::string header(8, '\0');
  const uint64_t huge = 1 << 20;
  std::memcpy(header.data(), &huge, 8);
  WriteBytes(path, header + "{}");
  CHECK_THROWS_WITH(LoadSafetensors(path), Catch::Contains("exceeds the file size"));
  WriteBytes(path, WithHeader(R"({"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 12]}})", std::string(12, 'x')));
  CHECK_THROWS_WITH(LoadSafetensors(path), Catch::Contains("tensor 'w': shape needs 16 bytes but data_offsets span 12"));
  WriteBytes(path, WithHeader(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", std::string(4, 'x')));
  CHECK_THROWS_WITH(LoadSafetensors(path), Catch::Contains("data_offsets out of range"));
  // Fractions are not cut to integers; a shape is a list.
  const std::string eight(8, 'x');
  WriteBytes(path, WithHeader(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 7.5]}})", eight));
  CHECK_THROWS_WITH(LoadSafetensors(path), Catch::Contains("tensor 'w': data_offsets holds 7.5, not an integer"));
  WriteBytes(path, WithHeader(R"({"w": {"dtype": "F32", "shape": 2, "data_offsets": [0, 8]}})", eight));
  CHECK_THROWS_WITH(LoadSafetensors(path), Catch::Contains("tensor 'w': shape is 2, not a list of integers"));
  WriteBytes(path, WithHeader(R"({"w": {"dtype": "Q4", "shape": [1], "data_offsets": [0, 1]}})", "x"));
  CHECK_THROWS_WITH(LoadSafetensors(path), Catch::Contains("unsupported dtype 'Q4'"));
  CHECK_THROWS_WITH(LoadSafetensors(TempPath("missing.safetensors")), Catch::Contains("cannot open"));
}

TEST_CASE("the tensors' bytes tile the data: no sharing, no holes, nothing after", "[safetensors]") {
  const std::string path = TempPath("tiling.safetensors");
  const std::string data(16, 'x');
  // Two tensors over the same bytes (a checkpoint edited to alias two parameters).
  WriteBytes(path, WithHeader(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
                              R"( "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
                              data.substr(0, 12)));
  CHECK_THROWS_WITH(LoadSafetensors(path), Catch::Contains("two tensors share bytes"));
  WriteBytes(path, WithHeader(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
                              R"( "b": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})",
                              data.substr(0, 8)));
  CHECK_THROWS_WITH(LoadSafetensors(path), Catch::Contains("two tensors share bytes"));
  WriteBytes(path, WithHeader(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
                              R"( "b": {"dtype": "F32", "shape": [1], "data_offsets": [12, 16]}})",
                              data));
  CHECK_THROWS_WITH(LoadSafetensors(path), Catch::Contains("bytes 8 to 12 of the data belong to no tensor"));
  WriteBytes(path, WithHeader(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", data));
  CHECK_THROWS_WITH(LoadSafetensors(path), Catch::Contains("the tensors end at byte 8 of 16"));
  WriteBytes(path, WithHeader(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]},)"
                              R"( "b": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})",
                              data));
  CHECK(LoadSafetensors(path).size() == 2);  // any order in the header, as long as they tile
}

}  // namespace
}  // namespace ps::models
