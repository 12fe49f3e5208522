#include "trainer/logging/host_memory.h"

#include <fstream>
#include <sstream>

namespace ps::trainer {

std::optional<HostMemory> ParseProcStatus(const std::string& text) {
  HostMemory out;
  bool rss = false, peak = false;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string key = line.substr(0, colon);
    int64_t* field = key == "VmRSS"      ? &out.rss_bytes
                     : key == "VmHWM"    ? &out.peak_rss_bytes
                     : key == "RssAnon"  ? &out.anon_bytes
                     : key == "RssFile"  ? &out.file_bytes
                     : key == "RssShmem" ? &out.shmem_bytes
                                         : nullptr;
    if (field == nullptr) continue;
    std::istringstream value(line.substr(colon + 1));
    int64_t kib = 0;
    std::string unit;
    if (!(value >> kib >> unit) || unit != "kB" || kib < 0) continue;  // the kernel writes "<n> kB"
    *field = kib * 1024;
    rss |= field == &out.rss_bytes;
    peak |= field == &out.peak_rss_bytes;
  }
  if (!rss || !peak) return std::nullopt;
  return out;
}

std::optional<HostMemory> ReadHostMemory() {
  std::ifstream in("/proc/self/status");
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return ParseProcStatus(text.str());
}

}  // namespace ps::trainer
