// Host memory mapped directly and made resident on many threads (start-up):
// the host pool's backing for chunk.host_pool_pinning: register. One cudaHostAlloc of
// tens of GB faults, zeroes and locks every page on one thread inside the driver; here
// the pages are faulted in (zeroed by the kernel) on LibTorch's intra-op threads, on
// transparent huge pages where the kernel offers them, and a single cudaHostRegister
// then only locks pages that are already there (device_arena.cc).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace ps::chunkmem {

// Huge-page size the mapping is aligned to (x86-64's 2 MiB transparent huge pages).
inline constexpr int64_t kHugePageBytes = int64_t{2} << 20;

// A uint8 CPU tensor of `bytes` (> 0) of anonymous private memory, 2 MiB aligned,
// advised for transparent huge pages, every page resident and zero on return. The
// mapping is released (munmap) when the last tensor referencing it dies. Throws
// c10::Error naming the bytes and errno when the mapping fails.
at::Tensor MapResidentHostBytes(int64_t bytes);

}  // namespace ps::chunkmem
