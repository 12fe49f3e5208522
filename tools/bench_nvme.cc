// Benchmark (not a test) of the NVMe tier (docs/chunkmem.md, "NVMe tier"):
// in one run, on one directory,
//   1. the directory's sequential O_DIRECT write and read bandwidth (NvmeFile, the tier's
//      own I/O path, on a file of the tier's size: every request queued at once);
//   2. the host Adam of the chunks with their state in RAM (no I/O): the compute alone;
//   3. optimizer steps through the NvmeRing: per chunk, its fp32 master, m and v read
//      ahead, updated by the CPU Adam kernel (fp32 gradient in RAM, bf16 parameter
//      written to RAM), written back behind, as the trainer's host step does.
// Reported: each step's time, its read + write bytes per second, and its ratio to the
// disk: the time its bytes take at the measured sequential bandwidths over the step's
// time, both for reads at the read figure plus writes at the write figure, and at the
// figure of reads and writes at once (half the file read while the other half is
// written); the lower is the result (goal: >= 0.8). The last line is one JSON object.
#include <cxxopts.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "chunkmem/nvme_file.h"
#include "chunkmem/nvme_ring.h"
#include "optim/cpu_adam.h"

namespace {

using ps::chunkmem::kNvmeAlignBytes;
using ps::chunkmem::NvmeExtent;
using ps::chunkmem::NvmeFile;
using ps::chunkmem::NvmeRing;
using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

struct Free {
  void operator()(void* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<char, Free>;

Buffer Aligned(int64_t bytes, char fill) {
  void* p = nullptr;
  if (posix_memalign(&p, kNvmeAlignBytes, bytes) != 0) throw std::bad_alloc();
  std::memset(p, fill, bytes);  // resident before any timing
  return Buffer(static_cast<char*>(p));
}

enum class Mode { kWrite, kRead, kMixed };

// Every `request`-byte request of the file queued at once, then all waited: bytes/s.
// kMixed: the first half read while the second is written, requests alternating.
double Sequential(NvmeFile& file, Mode mode, char* read_buffer, char* write_buffer, int64_t request) {
  const auto t0 = Clock::now();
  std::vector<NvmeFile::Ticket> tickets;
  const int64_t half = file.size_bytes() / 2 / request * request;
  for (int64_t at = 0; at < file.size_bytes(); at += request) {
    const int64_t n = std::min(request, file.size_bytes() - at);
    if (mode == Mode::kMixed) {
      if (at >= half) break;
      tickets.push_back(file.Read(at, read_buffer, request));
      tickets.push_back(file.Write(half + at, write_buffer, request));
    } else {
      tickets.push_back(mode == Mode::kWrite ? file.Write(at, write_buffer, n) : file.Read(at, read_buffer, n));
    }
  }
  for (auto t : tickets) file.Wait(t);
  return (mode == Mode::kMixed ? 2 * half : file.size_bytes()) / SecondsSince(t0);
}

// One chunk's Adam over its slot: fp32 master, m, v at `state` (three parts of
// `part_bytes`), fp32 gradient `grad`, bf16 parameter out into `out`.
void UpdateChunk(const ps::optim::CpuAdamKernels& kernels, char* state, int64_t part_bytes, int64_t numel,
                 const float* grad, uint16_t* out, int threads, int64_t step) {
  ps::optim::AdamWork w;
  w.span.master = reinterpret_cast<float*>(state);
  w.span.m = state + part_bytes;
  w.span.v = state + 2 * part_bytes;
  w.span.grad = grad;
  w.span.param_out = out;
  w.span.out_type = ps::optim::ElemType::kBf16;
  w.span.numel = numel;
  w.hyper = ps::optim::AdamHyper::Make(1e-4, 0.9, 0.999, 1e-8, 0.01, true, step, 1.0);
  ps::optim::ParallelAdam(kernels, {w}, threads);
}

// Optimizer steps through a ring of `slots` slots over `chunks` chunks of fp32 master, m
// and v (parts of `part` bytes): each chunk read ahead, updated, written behind. The
// seconds of each step, from its first read to its last write on the disk.
std::vector<double> RingSteps(NvmeFile& file, const ps::optim::CpuAdamKernels& kernels, int chunks, int slots,
                              int64_t numel, int64_t part, int threads, int steps, const float* grad, uint16_t* out) {
  const int64_t extent_bytes = 3 * part;
  std::vector<NvmeExtent> extents;
  std::vector<int> order;
  for (int c = 0; c < chunks; ++c) {
    extents.push_back({c * extent_bytes, extent_bytes});
    order.push_back(c);
  }
  std::vector<Buffer> slot_buffers;
  std::vector<void*> slot_ptrs;
  for (int s = 0; s < slots; ++s) {
    slot_buffers.push_back(Aligned(extent_bytes, 0));
    slot_ptrs.push_back(slot_buffers.back().get());
  }
  NvmeRing ring(file, extents, slot_ptrs);
  std::vector<double> step_s;
  for (int step = 1; step <= steps; ++step) {
    ring.Flush();  // the previous step's writes are done (a training step's forward and backward)
    const auto t0 = Clock::now();
    ring.BeginStep(order);
    for (int c : order) {
      char* state = static_cast<char*>(ring.Acquire(c));
      UpdateChunk(kernels, state, part, numel, grad, out, threads, step);
      ring.Release(c, /*written=*/true);
    }
    ring.Flush();  // the step's bytes are on the disk
    step_s.push_back(SecondsSince(t0));
    std::printf("step %d: %.3f s, %.0f MB/s read + write\n", step, step_s.back(), 2.0 * chunks * extent_bytes / step_s.back() / 1e6);
  }
  return step_s;
}

struct BenchArgs {
  std::string dir;
  int chunks = 8, slots = 4, steps = 3, threads = 2, pieces = 32;
  int64_t numel = 0, piece_bytes = 0;
};

// The command line; false after printing the help.
bool Parse(int argc, char** argv, BenchArgs& a) {
  cxxopts::Options options("bench_nvme", "The NVMe tier against the disk's sequential bandwidth");
  options.add_options()
      ("dir", "directory on the disk to measure (a file is created there and unlinked)", cxxopts::value<std::string>()->default_value("."))
      ("chunks", "chunks on the tier", cxxopts::value<int>()->default_value("8"))
      ("chunk-elements", "elements per chunk (fp32 master, m, v: 12 bytes each)", cxxopts::value<int64_t>()->default_value("16777216"))
      ("slots", "ring slots", cxxopts::value<int>()->default_value("4"))
      ("steps", "optimizer steps through the ring", cxxopts::value<int>()->default_value("3"))
      ("threads", "CPU Adam threads", cxxopts::value<int>()->default_value("2"))
      ("pieces", "pieces in flight", cxxopts::value<int>()->default_value("32"))
      ("piece-kib", "piece size in KiB", cxxopts::value<int64_t>()->default_value("1024"))
      ("h,help", "help");
  const auto args = options.parse(argc, argv);
  if (args.count("help")) {
    std::printf("%s\n", options.help().c_str());
    return false;
  }
  a.dir = args["dir"].as<std::string>();
  a.chunks = args["chunks"].as<int>();
  a.slots = args["slots"].as<int>();
  a.steps = args["steps"].as<int>();
  a.threads = args["threads"].as<int>();
  a.pieces = args["pieces"].as<int>();
  a.numel = args["chunk-elements"].as<int64_t>();
  a.piece_bytes = args["piece-kib"].as<int64_t>() * 1024;
  return true;
}

struct Bandwidths {
  double write_bps = 0, read_bps = 0, mixed_bps = 0;
};

// 1. Sequential bandwidth: the whole file written (initial state: zeros), then read, then both.
Bandwidths MeasureSequential(NvmeFile& file) {
  Buffer seq_read = Aligned(64 << 20, 0), seq_write = Aligned(64 << 20, 0);
  Bandwidths b;
  b.write_bps = Sequential(file, Mode::kWrite, seq_read.get(), seq_write.get(), 64 << 20);
  b.read_bps = Sequential(file, Mode::kRead, seq_read.get(), seq_write.get(), 64 << 20);
  b.mixed_bps = Sequential(file, Mode::kMixed, seq_read.get(), seq_write.get(), 64 << 20);
  std::printf("sequential O_DIRECT: write %.0f MB/s, read %.0f MB/s, both at once %.0f MB/s\n", b.write_bps / 1e6,
              b.read_bps / 1e6, b.mixed_bps / 1e6);
  return b;
}

// The ratios of the best step to the disk's references, printed, then the JSON line.
void Report(const NvmeFile& file, const Bandwidths& bw, double compute_s, const std::vector<double>& step_s,
            int64_t state_bytes) {
  const int64_t step_bytes = 2 * state_bytes;
  const double best = *std::min_element(step_s.begin(), step_s.end());
  const double disk_s = state_bytes / bw.read_bps + state_bytes / bw.write_bps;
  const double ratio_separate = disk_s / best;
  const double ratio_mixed = step_bytes / best / bw.mixed_bps;
  const double ratio = std::min(ratio_separate, ratio_mixed);
  std::printf("best step %.3f s (%.0f MB/s); at the separate read and write bandwidths its bytes take %.3f s "
              "(ratio %.2f), at the both-at-once bandwidth %.3f s (ratio %.2f); the lower: %.2f (goal >= 0.8)\n",
              best, step_bytes / best / 1e6, disk_s, ratio_separate, step_bytes / bw.mixed_bps, ratio_mixed, ratio);
  std::printf("{\"dir\": \"%s\", \"backend\": \"%s\", \"file_bytes\": %lld, \"write_bps\": %.0f, \"read_bps\": %.0f, "
              "\"mixed_bps\": %.0f, \"adam_only_s\": %.4f, \"best_step_s\": %.4f, \"step_bytes\": %lld, "
              "\"ratio_separate\": %.3f, \"ratio_mixed\": %.3f, \"ratio\": %.3f}\n",
              file.dir().c_str(), file.backend().c_str(), static_cast<long long>(file.size_bytes()), bw.write_bps,
              bw.read_bps, bw.mixed_bps, compute_s, best, static_cast<long long>(step_bytes), ratio_separate,
              ratio_mixed, ratio);
}

}  // namespace

int main(int argc, char** argv) {
  BenchArgs a;
  if (!Parse(argc, argv, a)) return 0;
  const int64_t part = ps::chunkmem::NvmeAlignUp(a.numel * 4);
  const int64_t extent_bytes = 3 * part;
  NvmeFile file(a.dir, a.chunks * extent_bytes, a.pieces, a.piece_bytes);
  std::printf("dir %s, backend %s, file %.2f GiB (%d chunks of %lld elements), %d slots, %d threads\n",
              file.dir().c_str(), file.backend().c_str(), file.size_bytes() / 1073741824.0, a.chunks,
              static_cast<long long>(a.numel), a.slots, a.threads);
  const Bandwidths bw = MeasureSequential(file);

  const auto kernels = ps::optim::KernelsFor(ps::optim::BestCpuIsa());
  std::vector<float> grad(a.numel, 1e-3f);
  std::vector<uint16_t> out(a.numel);
  // 2. The compute alone: the same updates with one chunk's state in RAM, chunks times.
  Buffer ram = Aligned(extent_bytes, 0);
  UpdateChunk(kernels, ram.get(), part, a.numel, grad.data(), out.data(), a.threads, 1);  // warm-up
  const auto t0 = Clock::now();
  for (int c = 0; c < a.chunks; ++c) UpdateChunk(kernels, ram.get(), part, a.numel, grad.data(), out.data(), a.threads, 2);
  const double compute_s = SecondsSince(t0);
  std::printf("Adam alone (%s): %.3f s per step\n", ps::optim::ToString(kernels.isa), compute_s);

  // 3. Steps through the ring.
  const std::vector<double> step_s =
      RingSteps(file, kernels, a.chunks, a.slots, a.numel, part, a.threads, a.steps, grad.data(), out.data());
  Report(file, bw, compute_s, step_s, a.chunks * extent_bytes);
  return 0;
}
