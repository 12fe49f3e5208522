// Host memory figures from /proc/self/status: the parser on a fixture (units, missing
// and malformed lines) and the live reading following an allocation that is touched.
#include <cstring>
#include <memory>

#include "tests/catch.h"
#include "trainer/logging/host_memory.h"

namespace ps::trainer {
namespace {

TEST_CASE("ParseProcStatus: kB figures as bytes, Rss parts optional, VmRSS and VmHWM required", "[host_memory]") {
  const std::string status =
      "Name:\tps_train\nVmPeak:\t 9000000 kB\nVmHWM:\t  204800 kB\nVmRSS:\t  102400 kB\n"
      "RssAnon:\t   81920 kB\nRssFile:\t   20000 kB\nRssShmem:\t     480 kB\nThreads:\t4\n";
  const auto m = ParseProcStatus(status);
  REQUIRE(m.has_value());
  CHECK(m->rss_bytes == 102400LL * 1024);
  CHECK(m->peak_rss_bytes == 204800LL * 1024);
  CHECK(m->anon_bytes == 81920LL * 1024);
  CHECK(m->file_bytes == 20000LL * 1024);
  CHECK(m->shmem_bytes == 480LL * 1024);

  const auto old_kernel = ParseProcStatus("VmHWM:\t 10 kB\nVmRSS:\t 8 kB\n");  // before Linux 4.5: no Rss* lines
  REQUIRE(old_kernel.has_value());
  CHECK(old_kernel->rss_bytes == 8 * 1024);
  CHECK(old_kernel->anon_bytes == 0);

  CHECK_FALSE(ParseProcStatus("VmRSS:\t 8 kB\n").has_value());           // no peak
  CHECK_FALSE(ParseProcStatus("VmHWM:\t 8 kB\nVmRSS:\t x kB\n").has_value());  // unreadable figure
  CHECK_FALSE(ParseProcStatus("VmHWM:\t 8 kB\nVmRSS:\t 8 MB\n").has_value());  // not the kernel's unit
  CHECK_FALSE(ParseProcStatus("").has_value());
}

TEST_CASE("ReadHostMemory: 64 MiB touched show in resident memory, anonymous, and in the peak", "[host_memory]") {
  const auto before = ReadHostMemory();
  REQUIRE(before.has_value());  // Linux: the tests run there
  CHECK(before->rss_bytes > 0);
  CHECK(before->peak_rss_bytes >= before->rss_bytes);
  constexpr size_t kBytes = 64 << 20;
  constexpr int64_t kSlackBytes = 4 << 20;
  std::unique_ptr<char[]> block(new char[kBytes]);
  std::memset(block.get(), 1, kBytes);  // resident only once written
  asm volatile("" : : "r"(block.get()) : "memory");  // the writes happen before the reading below
  const auto after = ReadHostMemory();
  REQUIRE(after.has_value());
  CHECK(block[kBytes - 1] == 1);
  CHECK(after->rss_bytes - before->rss_bytes >= static_cast<int64_t>(kBytes) * 9 / 10);
  CHECK(after->anon_bytes - before->anon_bytes >= static_cast<int64_t>(kBytes) * 9 / 10);
  CHECK(after->peak_rss_bytes >= after->rss_bytes);  // one reading: VmHWM is at least VmRSS
  block.reset();
  const auto freed = ReadHostMemory();
  REQUIRE(freed.has_value());
  // The peak stays. The kernel's RSS counters are approximate (per-thread caches,
  // folded in lazily: differences of tens of KiB between readings were seen), hence
  // the slack in comparisons across readings.
  CHECK(freed->peak_rss_bytes >= after->rss_bytes - kSlackBytes);
}

}  // namespace
}  // namespace ps::trainer
