// NcclInfo: what the NCCL library linked into this binary is ("none" in a CPU build).
// The CUDA build (--config=cuda) compiles the NCCL path; PS_NCCL_CHECK wraps NCCL calls.
#pragma once

#include <string>

namespace ps::comm {

// "NCCL 2.28.9" in a CUDA build, "NCCL not built (CPU build)" otherwise.
std::string NcclVersionString();

}  // namespace ps::comm
