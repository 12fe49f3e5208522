#include "optim/cpu_topology.h"

#include <sched.h>
#ifdef PS_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <tuple>
#include <utility>

namespace ps::optim {
namespace {

// The first integer in `path`, or `fallback` when the file is missing or holds none.
int ReadInt(const std::filesystem::path& path, int fallback) {
  std::ifstream in(path);
  int value = fallback;
  if (!(in >> value)) return fallback;
  return value;
}

// The M of a cpuN/nodeM entry (the kernel links each CPU to its node), or 0.
int NodeOf(const std::filesystem::path& cpu_dir) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(cpu_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() > 4 && name.compare(0, 4, "node") == 0 &&
        std::all_of(name.begin() + 4, name.end(), [](unsigned char c) { return std::isdigit(c) != 0; })) {
      return std::stoi(name.substr(4));
    }
  }
  return 0;
}

}  // namespace

std::vector<int> AllowedCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> out;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return out;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) out.push_back(cpu);
  }
  return out;
}

std::vector<int> PhysicalCoreCpus(const std::vector<int>& allowed, int preferred_node, const std::string& cpu_root) {
  struct Cpu {
    int cpu, package, core, node;
  };
  std::map<std::pair<int, int>, Cpu> first_of_core;  // (package, core) -> lowest CPU
  std::vector<int> sorted = allowed;
  std::sort(sorted.begin(), sorted.end());
  for (int cpu : sorted) {
    const std::filesystem::path dir = std::filesystem::path(cpu_root) / ("cpu" + std::to_string(cpu));
    const int package = ReadInt(dir / "topology" / "physical_package_id", 0);
    // Unreadable: its own core (a negative id no real core has).
    const int core = ReadInt(dir / "topology" / "core_id", -1 - cpu);
    first_of_core.emplace(std::make_pair(package, core), Cpu{cpu, package, core, NodeOf(dir)});
  }
  std::vector<Cpu> cores;
  for (const auto& [key, c] : first_of_core) cores.push_back(c);
  std::sort(cores.begin(), cores.end(), [preferred_node](const Cpu& a, const Cpu& b) {
    return std::make_tuple(a.node != preferred_node, a.node, a.cpu) <
           std::make_tuple(b.node != preferred_node, b.node, b.cpu);
  });
  std::vector<int> out;
  for (const Cpu& c : cores) out.push_back(c.cpu);
  return out;
}

int PciNumaNode(const std::string& bus_id, const std::string& pci_root) {
  std::string id = bus_id;
  std::transform(id.begin(), id.end(), id.begin(), [](unsigned char c) { return std::tolower(c); });
  const int node = ReadInt(std::filesystem::path(pci_root) / id / "numa_node", -1);
  return node < 0 ? -1 : node;
}

int CudaDeviceNumaNode(int index) {
#ifdef PS_WITH_CUDA
  char bus_id[64] = {0};
  if (cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), index) != cudaSuccess) {
    cudaGetLastError();  // clear it: not this code's failure to report
    return -1;
  }
  return PciNumaNode(bus_id);
#else
  (void)index;
  return -1;
#endif
}

}  // namespace ps::optim
