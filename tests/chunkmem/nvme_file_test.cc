// NvmeFile and CheckNvmeDir (chunkmem/nvme_file.h) on this machine's disk: bytes round
// trip through both backends with many requests and pieces in flight; the file is
// unlinked (no name left behind); bad requests and unusable directories are refused with
// the path and the bytes; each completion result (short, transient, failed) is read as
// the ring must act on it.
#include "chunkmem/nvme_file.h"

#include <dirent.h>
#include <sys/vfs.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/catch.h"
#include "tests/file_size_limit.h"
#include "tests/temp_dir.h"

using ps::testing::TempDir;

namespace ps::chunkmem {
namespace {

struct AlignedBuffer {
  explicit AlignedBuffer(int64_t bytes) : bytes(bytes) {
    void* p = nullptr;
    REQUIRE(posix_memalign(&p, kNvmeAlignBytes, bytes) == 0);
    data.reset(static_cast<unsigned char*>(p));
  }
  struct Free {
    void operator()(unsigned char* p) const { std::free(p); }
  };
  std::unique_ptr<unsigned char, Free> data;
  int64_t bytes;
};

void Fill(AlignedBuffer& b, unsigned seed) {
  for (int64_t i = 0; i < b.bytes; ++i) b.data.get()[i] = static_cast<unsigned char>((i * 131 + seed * 7919 + i / 4096) & 0xff);
}

int CountEntries(const std::string& dir) {
  int n = 0;
  DIR* d = opendir(dir.c_str());
  REQUIRE(d != nullptr);
  while (dirent* e = readdir(d)) {
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) ++n;
  }
  closedir(d);
  return n;
}

std::string FreshDir(const std::string& name) {
  const std::string dir = TempDir() + "/" + name;
  REQUIRE(system(("rm -rf '" + dir + "' && mkdir -p '" + dir + "'").c_str()) == 0);
  return dir;
}

}  // namespace

TEST_CASE("NvmeFile: bytes round trip with many requests and pieces in flight, on both backends", "[nvme]") {
  for (const bool uring : {true, false}) {
    const std::string dir = FreshDir(uring ? "uring" : "blocking");
    constexpr int64_t kRequest = 96 * 1024;  // 3 pieces of 32 KiB each
    constexpr int kRequests = 24;
    NvmeFile file(dir, kRequests * kRequest + 1, /*pieces_in_flight=*/4, /*piece_bytes=*/32 * 1024, uring);
    INFO(file.backend());
    CHECK(file.size_bytes() == kRequests * kRequest + kNvmeAlignBytes);  // rounded up
    CHECK((file.backend() == "io_uring") == uring);
    CHECK(CountEntries(dir) == 0);  // unlinked at once: nothing a later run could read

    std::vector<AlignedBuffer> out, in;
    std::vector<NvmeFile::Ticket> tickets;
    for (int r = 0; r < kRequests; ++r) {
      out.emplace_back(kRequest);
      Fill(out.back(), r);
      tickets.push_back(file.Write(r * kRequest, out.back().data.get(), kRequest));  // all queued at once
    }
    for (auto t : tickets) file.Wait(t);
    tickets.clear();
    for (int r = kRequests - 1; r >= 0; --r) {  // read back in the other order
      in.emplace_back(kRequest);
      tickets.push_back(file.Read(r * kRequest, in.back().data.get(), kRequest));
    }
    for (auto t : tickets) {
      CHECK_NOTHROW(file.Wait(t));
    }
    for (int r = 0; r < kRequests; ++r) {
      const AlignedBuffer& got = in[kRequests - 1 - r];
      CHECK(std::memcmp(got.data.get(), out[r].data.get(), kRequest) == 0);
    }
    const NvmeFileStats stats = file.stats();
    CHECK(stats.written_bytes == kRequests * kRequest);
    CHECK(stats.read_bytes == kRequests * kRequest);
    CHECK(stats.requests == 2 * kRequests);
    CHECK_THROWS_WITH(file.Wait(tickets.front()), Catch::Contains("already waited"));
  }
}

// A write the disk refuses (here EFBIG: the file may not grow past a limit set after it
// was created, as when a disk fills) fails its Wait with the path, the offset and the
// error; the file's other bytes keep working. In a child process (the limit stays there).
TEST_CASE("NvmeFile: a refused write fails its Wait naming the file, offset and error; the rest works", "[nvme]") {
  for (const bool uring : {true, false}) {
    const std::string dir = FreshDir(uring ? "efbig_uring" : "efbig_blocking");
    constexpr int64_t kPart = 256 * 1024;
    const int status = testing::RunInChild([&] {
      NvmeFile file(dir, 4 * kPart, /*pieces_in_flight=*/4, /*piece_bytes=*/64 * 1024, uring);
      if ((file.backend() == "io_uring") != uring) return 5;  // the backend asked for is the one tested
      AlignedBuffer out(kPart), in(kPart);
      Fill(out, 3);
      file.Wait(file.Write(0, out.data.get(), kPart));
      testing::LimitFileSize(kPart);  // writes from byte kPart on fail with EFBIG
      try {
        file.Wait(file.Write(2 * kPart, out.data.get(), kPart));
        return 2;  // not refused
      } catch (const std::runtime_error& e) {
        const std::string what = e.what();
        const bool named = what.find("NVMe tier: writing") != std::string::npos &&
                           what.find("at offset " + std::to_string(2 * kPart)) != std::string::npos &&
                           what.find(dir) != std::string::npos && what.find("File too large") != std::string::npos;
        if (!named) return 3;
      }
      file.Wait(file.Write(0, out.data.get(), kPart));  // below the limit: still written
      file.Wait(file.Read(0, in.data.get(), kPart));
      return std::memcmp(in.data.get(), out.data.get(), kPart) == 0 ? 0 : 4;
    });
    INFO((uring ? "io_uring" : "pread/pwrite") << ": child exit status " << status);
    CHECK(status == 0);
  }
}

TEST_CASE("a piece's completion: done, the rest again, a bounded retry of EAGAIN/EINTR, or failed", "[nvme]") {
  constexpr int64_t kPiece = 4 * kNvmeAlignBytes;
  CHECK(ClassifyCompletion(kPiece, kPiece, 0).kind == PieceOutcome::kDone);
  const PieceOutcome shorter = ClassifyCompletion(kNvmeAlignBytes, kPiece, 3);
  CHECK(shorter.kind == PieceOutcome::kAgain);
  CHECK(shorter.done_bytes == kNvmeAlignBytes);
  CHECK_FALSE(shorter.transient);  // progress: not counted towards the bound
  for (const int64_t err : {-EAGAIN, -EINTR}) {
    INFO("errno " << -err);
    for (int tries : {0, kNvmeTransientRetries - 1}) {
      const PieceOutcome again = ClassifyCompletion(err, kPiece, tries);
      CHECK(again.kind == PieceOutcome::kAgain);
      CHECK(again.transient);
      CHECK(again.done_bytes == 0);
    }
    const PieceOutcome given_up = ClassifyCompletion(err, kPiece, kNvmeTransientRetries);
    CHECK(given_up.kind == PieceOutcome::kFailed);
    CHECK_THAT(given_up.error, Catch::Contains(std::strerror(static_cast<int>(-err))) &&
                                   Catch::Contains(std::to_string(kNvmeTransientRetries + 1) + " times in a row"));
  }
  const PieceOutcome io = ClassifyCompletion(-EIO, kPiece, 0);
  CHECK(io.kind == PieceOutcome::kFailed);
  CHECK(io.error == std::strerror(EIO));
  CHECK(ClassifyCompletion(0, kPiece, 0).kind == PieceOutcome::kFailed);
  const PieceOutcome odd = ClassifyCompletion(100, kPiece, 0);
  CHECK(odd.kind == PieceOutcome::kFailed);
  CHECK_THAT(odd.error, Catch::Contains("short transfer of 100 bytes"));
}

TEST_CASE("NvmeFile: requests must be aligned and within the file", "[nvme]") {
  NvmeFile file(FreshDir("bad"), 4 * kNvmeAlignBytes);
  AlignedBuffer b(2 * kNvmeAlignBytes);
  CHECK_THROWS_WITH(file.Read(100, b.data.get(), kNvmeAlignBytes), Catch::Contains("4 KiB-aligned"));
  CHECK_THROWS_WITH(file.Read(0, b.data.get(), 100), Catch::Contains("4 KiB-aligned"));
  CHECK_THROWS_WITH(file.Read(0, b.data.get() + 8, kNvmeAlignBytes), Catch::Contains("4 KiB-aligned"));
  CHECK_THROWS_WITH(file.Write(3 * kNvmeAlignBytes, b.data.get(), 2 * kNvmeAlignBytes), Catch::Contains("16384-byte file"));
  CHECK(file.stats().requests == 0);
}

TEST_CASE("CheckNvmeDir and NvmeFile refuse what cannot hold the tier, naming the path and bytes", "[nvme]") {
  const std::string dir = FreshDir("check");
  CHECK(CheckNvmeDir(dir, 1 << 20).empty());
  CHECK(CountEntries(dir) == 0);  // the probe is gone

  CHECK_THAT(CheckNvmeDir(dir + "/missing", 1), Catch::Contains(dir + "/missing") && Catch::Contains("No such file"));
  std::ofstream(dir + "/plain") << "x";
  CHECK_THAT(CheckNvmeDir(dir + "/plain", 1), Catch::Contains("is not a directory"));
  CHECK_THAT(CheckNvmeDir("/proc", 1), Catch::Contains("'/proc' is not writable"));
  const int64_t huge = int64_t{1} << 60;
  CHECK_THAT(CheckNvmeDir(dir, huge), Catch::Contains("bytes free; the NVMe tier needs " + std::to_string(huge) + " bytes"));
  CHECK_THROWS_WITH(NvmeFile(dir, huge), Catch::Contains("NVMe tier: directory '" + dir + "'") &&
                                            Catch::Contains(std::to_string(huge)));

  struct statfs fs {};
  constexpr long kTmpfsMagic = 0x01021994;
  if (statfs("/dev/shm", &fs) == 0 && fs.f_type == kTmpfsMagic) {
    CHECK_THAT(CheckNvmeDir("/dev/shm", 1), Catch::Contains("'/dev/shm' is a tmpfs"));
  } else {
    WARN("no tmpfs at /dev/shm: the tmpfs refusal is not exercised");
  }
}

}  // namespace ps::chunkmem
