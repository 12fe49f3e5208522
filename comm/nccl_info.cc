#include "comm/nccl_info.h"

#ifdef PS_WITH_CUDA
#include <nccl.h>

#include <stdexcept>

// Throws with NCCL's own message; never exits (only main decides how to end).
#define PS_NCCL_CHECK(expr)                                                          \
  do {                                                                               \
    ncclResult_t ps_nccl_result = (expr);                                            \
    if (ps_nccl_result != ncclSuccess) {                                             \
      throw std::runtime_error(std::string("NCCL error in " #expr ": ") +            \
                               ncclGetErrorString(ps_nccl_result));                  \
    }                                                                                \
  } while (0)
#endif

namespace ps::comm {

std::string NcclVersionString() {
#ifdef PS_WITH_CUDA
  int version = 0;
  PS_NCCL_CHECK(ncclGetVersion(&version));
  // NCCL >= 2.9 encodes major*10000 + minor*100 + patch.
  return "NCCL " + std::to_string(version / 10000) + "." + std::to_string(version / 100 % 100) +
         "." + std::to_string(version % 100);
#else
  return "NCCL not built (CPU build)";
#endif
}

}  // namespace ps::comm
