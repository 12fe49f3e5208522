#include "chunkmem/host_mapping.h"

#include <ATen/Parallel.h>
#include <ATen/ops/from_blob.h>
#include <c10/util/Exception.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "base/parallel_tasks.h"

namespace ps::chunkmem {

namespace {

// What the process may still fault in, in bytes: MemAvailable of /proc/meminfo, capped
// by the cgroup v2 limit less its usage where there is one; -1 where neither reads.
int64_t AvailableHostBytes() {
  int64_t available = -1;
  std::ifstream meminfo("/proc/meminfo");
  for (std::string line; std::getline(meminfo, line);) {
    int64_t kib = 0;
    if (std::sscanf(line.c_str(), "MemAvailable: %" SCNd64 " kB", &kib) == 1) available = kib * 1024;
  }
  int64_t limit = 0, usage = 0;
  std::ifstream max_file("/sys/fs/cgroup/memory.max"), current_file("/sys/fs/cgroup/memory.current");
  if (max_file >> limit && current_file >> usage && limit > usage) {  // "max" (no limit) does not parse
    available = available < 0 ? limit - usage : std::min(available, limit - usage);
  }
  return available;
}

}  // namespace

at::Tensor MapResidentHostBytes(int64_t bytes) {
  TORCH_CHECK(bytes > 0, "chunkmem: a host mapping needs a size > 0, got ", bytes);
  // Faulting in more than the machine has would end in the kernel's OOM killer, not in
  // an error: refuse first.
  const int64_t available = AvailableHostBytes();
  TORCH_CHECK(available < 0 || bytes <= available, "chunkmem: a host pool of ", bytes,
              " bytes is more than the machine's available memory (", available,
              " bytes: MemAvailable, or the cgroup's limit less its usage); lower chunk.host_budget_bytes or use "
              "chunk.host_pool_pinning: host_alloc");
  // The mapping covers whole base pages (munmap takes page-aligned lengths); over-map by
  // one huge page and trim, so the payload starts on a huge-page boundary (the kernel can
  // only back aligned 2 MiB ranges with huge pages).
  const int64_t page = sysconf(_SC_PAGESIZE) > 0 ? sysconf(_SC_PAGESIZE) : 4096;
  const auto mapped = static_cast<size_t>((bytes + page - 1) / page * page);
  const size_t span = mapped + kHugePageBytes;
  void* raw = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  TORCH_CHECK(raw != MAP_FAILED, "chunkmem: mmap of ", span, " bytes of host memory failed: ", std::strerror(errno));
  const auto start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (start + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  const size_t head = aligned - start, tail = span - head - mapped;
  // mmap returns page-aligned addresses, so both trims are page-aligned and cannot fail.
  if (head > 0) TORCH_CHECK(munmap(raw, head) == 0, "chunkmem: munmap: ", std::strerror(errno));
  if (tail > 0) {
    TORCH_CHECK(munmap(reinterpret_cast<void*>(aligned + mapped), tail) == 0, "chunkmem: munmap: ", std::strerror(errno));
  }
  char* base = reinterpret_cast<char*>(aligned);
  (void)madvise(base, mapped, MADV_HUGEPAGE);  // a hint: kernels without THP ignore it
  // One write per base page faults it in (the kernel zeroes it); a huge page per task on
  // run.threads threads.
  const int64_t slices = (bytes + kHugePageBytes - 1) / kHugePageBytes;
  ps::base::ParallelTasks(slices, at::get_num_threads(), [&](int64_t slice, int) {
    const int64_t last = std::min((slice + 1) * kHugePageBytes, bytes);
    for (int64_t at = slice * kHugePageBytes; at < last; at += page) {
      *reinterpret_cast<volatile char*>(base + at) = 0;
    }
  });
  return at::from_blob(
      base, {bytes}, [mapped](void* p) { (void)munmap(p, mapped); }, at::TensorOptions().dtype(at::kByte));
}

}  // namespace ps::chunkmem
