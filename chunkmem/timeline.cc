#include "chunkmem/timeline.h"

#include <c10/util/Exception.h>

#include <cstdio>
#include <fstream>

namespace ps::chunkmem {

ChunkTimeline::ChunkTimeline() : start_(std::chrono::steady_clock::now()) {}

int64_t ChunkTimeline::NowUs() const {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start_).count();
}

void ChunkTimeline::Copy(const std::string& what, int chunk, int64_t bytes, int64_t start_us) {
  events_.push_back({'X', what, start_us, std::max<int64_t>(1, NowUs() - start_us), chunk, bytes, 0});
}

void ChunkTimeline::Moment(const std::string& what) { events_.push_back({'i', what, NowUs(), 0, -1, 0, 0}); }

void ChunkTimeline::Bytes(int64_t device_bytes, int64_t host_bytes) {
  events_.push_back({'C', "chunk bytes", NowUs(), 0, -1, device_bytes, host_bytes});
}

void ChunkTimeline::WriteChromeTrace(const std::string& path) const {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    TORCH_CHECK(out.good(), tmp, ": cannot open for writing");
    out << "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
    out << R"({"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "chunk runtime"}})";
    for (const auto& e : events_) {
      out << ",\n";
      switch (e.phase) {
        case 'X':
          out << R"({"name": ")" << e.name << " chunk " << e.chunk << R"(", "cat": ")" << e.name
              << R"(", "ph": "X", "pid": 1, "tid": )" << (e.name == "fetch" ? 1 : 2) << ", \"ts\": " << e.ts_us
              << ", \"dur\": " << e.dur_us << ", \"args\": {\"chunk\": " << e.chunk << ", \"bytes\": " << e.a
              << "}}";
          break;
        case 'i':
          out << R"({"name": ")" << e.name << R"(", "ph": "i", "s": "p", "pid": 1, "tid": 0, "ts": )" << e.ts_us
              << "}";
          break;
        default:
          out << R"({"name": "chunk bytes", "ph": "C", "pid": 1, "ts": )" << e.ts_us << R"(, "args": {"device": )"
              << e.a << ", \"host\": " << e.b << "}}";
      }
    }
    out << "\n]}\n";
    TORCH_CHECK(out.good(), tmp, ": write failed");
  }
  TORCH_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, path, ": rename failed");
}

}  // namespace ps::chunkmem
