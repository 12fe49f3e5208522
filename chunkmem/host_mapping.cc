#include "chunkmem/host_mapping.h"

#include <ATen/Parallel.h>
#include <ATen/ops/from_blob.h>
#include <c10/util/Exception.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace ps::chunkmem {

at::Tensor MapResidentHostBytes(int64_t bytes) {
  TORCH_CHECK(bytes > 0, "chunkmem: a host mapping needs a size > 0, got ", bytes);
  // Over-map by one huge page and trim, so the payload starts on a huge-page boundary
  // (the kernel can only back aligned 2 MiB ranges with huge pages).
  const size_t span = static_cast<size_t>(bytes) + kHugePageBytes;
  void* raw = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  TORCH_CHECK(raw != MAP_FAILED, "chunkmem: mmap of ", span, " bytes of host memory failed: ", std::strerror(errno));
  const auto start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (start + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  const size_t head = aligned - start, tail = span - head - static_cast<size_t>(bytes);
  if (head > 0) munmap(raw, head);
  if (tail > 0) munmap(reinterpret_cast<void*>(aligned + bytes), tail);
  char* base = reinterpret_cast<char*>(aligned);
  (void)madvise(base, static_cast<size_t>(bytes), MADV_HUGEPAGE);  // a hint: kernels without THP ignore it
  // One write per base page faults it in (the kernel zeroes it); slices of huge pages
  // on the intra-op threads.
  const int64_t page = sysconf(_SC_PAGESIZE) > 0 ? sysconf(_SC_PAGESIZE) : 4096;
  const int64_t slices = (bytes + kHugePageBytes - 1) / kHugePageBytes;
  at::parallel_for(0, slices, 1, [&](int64_t begin, int64_t end) {
    const int64_t last = std::min(end * kHugePageBytes, bytes);
    for (int64_t at = begin * kHugePageBytes; at < last; at += page) {
      *reinterpret_cast<volatile char*>(base + at) = 0;
    }
  });
  const auto size = static_cast<size_t>(bytes);
  return at::from_blob(
      base, {bytes}, [size](void* p) { munmap(p, size); }, at::TensorOptions().dtype(at::kByte));
}

}  // namespace ps::chunkmem
