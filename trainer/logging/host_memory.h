// The process's resident host memory, read from /proc/self/status (Linux): now, its
// peak, and what kind of pages (peak resident memory against the host pool). The
// training loop logs it at the end of start-up and on every logged step, so
// a run shows when resident memory grows past the pool, and whether it is anonymous
// memory (heap, pinned buffers), mapped files (libraries) or shared memory.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace ps::trainer {

struct HostMemory {
  int64_t rss_bytes = 0;       // VmRSS: resident now
  int64_t peak_rss_bytes = 0;  // VmHWM: the most resident so far (what getrusage's ru_maxrss reports)
  int64_t anon_bytes = 0;      // RssAnon: heap, anonymous mappings, pinned host memory
  int64_t file_bytes = 0;      // RssFile: mapped files (the libraries' code and data)
  int64_t shmem_bytes = 0;     // RssShmem: shared memory
};

// Parses the text of a /proc/<pid>/status file. nullopt when VmRSS or VmHWM is missing
// (not Linux, or a kernel without them); the Rss* parts stay 0 where absent.
std::optional<HostMemory> ParseProcStatus(const std::string& text);

// This process's figures; nullopt where /proc/self/status cannot be read or parsed.
std::optional<HostMemory> ReadHostMemory();

}  // namespace ps::trainer
