// Where a chunk's optimizer state lies in the NVMe tier's file (docs/chunkmem.md, "NVMe
// tier"): its parts, fp32 master (none when the compute chunk is the master, fp32
// compute), Adam m and v (their payload bytes: chunkmem/state_layout.h), one after the
// other, each starting at a 4 KiB boundary (O_DIRECT). Pure arithmetic, shared by the
// tier plan (bytes) and NvmeState (offsets).
#pragma once

#include <array>
#include <cstdint>

namespace ps::chunkmem {

inline constexpr int64_t kNvmeAlignBytes = 4096;  // O_DIRECT: offsets, lengths and buffers

inline int64_t NvmeAlignUp(int64_t bytes) { return (bytes + kNvmeAlignBytes - 1) / kNvmeAlignBytes * kNvmeAlignBytes; }

enum NvmePart { kNvmeMaster = 0, kNvmeM = 1, kNvmeV = 2 };

struct NvmeParts {
  std::array<int64_t, 3> offset_bytes{};  // within the chunk's extent, [NvmePart]
  std::array<int64_t, 3> bytes{};         // the payloads' bytes (master 0: none)
  int64_t extent_bytes = 0;               // the chunk's bytes in the file (4 KiB multiple)
};

// `master_bytes` 0 when the master is the compute chunk; `moment_bytes`: one of m, v.
inline NvmeParts NvmePartsOf(int64_t master_bytes, int64_t moment_bytes) {
  NvmeParts p;
  p.bytes = {master_bytes, moment_bytes, moment_bytes};
  int64_t at = 0;
  for (int i = 0; i < 3; ++i) {
    p.offset_bytes[i] = at;
    at += NvmeAlignUp(p.bytes[i]);
  }
  p.extent_bytes = at;
  return p;
}

// The slots of the ring: `requested` (chunk.nvme_ring_slots), but no more than one per
// chunk on the tier (a slot beyond those would never hold anything) and at least the 2 a
// ring needs (NvmeRing).
inline int64_t NvmeRingSlots(int64_t requested, int64_t chunks_on_tier) {
  const int64_t used = requested < chunks_on_tier ? requested : chunks_on_tier;
  return used < 2 ? 2 : used;
}

// Host bytes of a ring of `slots` slots for extents of at most `largest_extent_bytes`,
// each slot one alignment unit more to start on a 4 KiB boundary (NvmeState).
inline int64_t NvmeRingBytes(int64_t slots, int64_t largest_extent_bytes) {
  return slots * (largest_extent_bytes + kNvmeAlignBytes);
}

}  // namespace ps::chunkmem
