// Pinning the host Adam threads (optim/cpu_topology.h, CpuAdamKernels::pin_cpus): one
// CPU per physical core from a fake sysfs tree (two packages, two cores each, two
// hyper-threads per core, one NUMA node per package), the preferred node first; the PCI
// device's node; and ParallelAdam's threads really running on the pinned CPUs, the
// caller's own CPU mask given back afterwards, results bitwise those of unpinned runs.
#include <pthread.h>
#include <sched.h>

#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <vector>

#include "optim/cpu_adam.h"
#include "optim/cpu_topology.h"
#include "tests/catch.h"
#include "tests/temp_dir.h"

namespace ps::optim {
namespace {

namespace fs = std::filesystem;

void Write(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text << "\n";
}

// CPUs 0-3 on package 0 (node 0), 4-7 on package 1 (node 1); CPU k and k+2 are
// hyper-threads of one core within each package (core ids 0 and 1).
fs::path FakeCpuTree(const fs::path& root) {
  for (int cpu = 0; cpu < 8; ++cpu) {
    const fs::path dir = root / ("cpu" + std::to_string(cpu));
    Write(dir / "topology" / "physical_package_id", std::to_string(cpu / 4));
    Write(dir / "topology" / "core_id", std::to_string(cpu % 2));
    fs::create_directories(dir / ("node" + std::to_string(cpu / 4)));
  }
  return root;
}

TEST_CASE("one CPU per physical core, the preferred NUMA node first", "[cpu_topology]") {
  const fs::path tmp = fs::path(testing::TempDir()) / "cpu_topology";
  const fs::path root = FakeCpuTree(tmp / "cpu");
  const std::vector<int> all = {0, 1, 2, 3, 4, 5, 6, 7};
  CHECK(PhysicalCoreCpus(all, -1, root.string()) == std::vector<int>{0, 1, 4, 5});
  CHECK(PhysicalCoreCpus(all, 1, root.string()) == std::vector<int>{4, 5, 0, 1});
  // Only some CPUs allowed (a Slurm cpuset): the lowest allowed sibling stands for its core.
  CHECK(PhysicalCoreCpus({2, 3, 5, 7}, 0, root.string()) == std::vector<int>{2, 3, 5});
  // No topology files at all: every CPU is its own core on node 0.
  CHECK(PhysicalCoreCpus({3, 1}, 0, (tmp / "missing").string()) == std::vector<int>{1, 3});
}

TEST_CASE("the NUMA node of a PCI device, -1 when unknown", "[cpu_topology]") {
  const fs::path root = fs::path(testing::TempDir()) / "pci_numa";
  Write(root / "0000:3b:00.0" / "numa_node", "1");
  Write(root / "0000:af:00.0" / "numa_node", "-1");
  CHECK(PciNumaNode("0000:3B:00.0", root.string()) == 1);  // CUDA spells it in upper case
  CHECK(PciNumaNode("0000:af:00.0", root.string()) == -1);
  CHECK(PciNumaNode("0000:00:01.0", root.string()) == -1);
}

// The CPUs ParallelAdam's kernel calls ran on (a kernel that records sched_getcpu()).
std::mutex seen_mu;
std::set<int> seen_cpus;
void RecordingAdam(const AdamSpan& span, const AdamHyper& hyper) {
  {
    std::lock_guard<std::mutex> lock(seen_mu);
    seen_cpus.insert(sched_getcpu());
  }
  KernelsFor(CpuIsa::kScalar).adam(span, hyper);
}

cpu_set_t CallerMask() {
  cpu_set_t set;
  CPU_ZERO(&set);
  REQUIRE(pthread_getaffinity_np(pthread_self(), sizeof(set), &set) == 0);
  return set;
}

TEST_CASE("pinned kernel threads run on the given CPUs; the caller's mask is restored; same bits",
          "[cpu_topology][cpu_adam]") {
  const std::vector<int> allowed = AllowedCpus();
  REQUIRE_FALSE(allowed.empty());
  const int64_t n = 64 * 1024;
  auto run = [&](const std::vector<int>& pin) {
    std::vector<float> master(n, 1.0f), m(n, 0.0f), v(n, 0.0f), grad(n);
    for (int64_t i = 0; i < n; ++i) grad[i] = static_cast<float>((i % 97) - 48) * 1e-3f;
    AdamWork w;
    w.span.master = master.data();
    w.span.m = m.data();
    w.span.v = v.data();
    w.span.grad = grad.data();
    w.span.grad_type = ElemType::kFp32;
    w.span.numel = n;
    w.hyper = AdamHyper::Make(1e-3, 0.9, 0.95, 1e-8, 0.1, true, 1, 1.0);
    CpuAdamKernels k = KernelsFor(CpuIsa::kScalar);
    k.adam = &RecordingAdam;
    k.pin_cpus = pin;
    seen_cpus.clear();
    ParallelAdam(k, {w}, 4);
    return master;
  };
  const std::vector<float> unpinned = run({});
  const cpu_set_t before = CallerMask();
  // Every thread on one CPU (the last allowed one): all four kernel calls ran there.
  const std::vector<float> pinned = run({allowed.back()});
  CHECK(seen_cpus == std::set<int>{allowed.back()});
  CHECK(pinned == unpinned);
  const cpu_set_t after = CallerMask();
  CHECK(CPU_EQUAL(&before, &after));  // the calling thread floats again as before
}

}  // namespace
}  // namespace ps::optim
