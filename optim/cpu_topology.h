// CPU topology for pinning the host Adam threads (optimizer.pin_cpu_threads): one
// logical CPU per physical core, the GPU's NUMA node first. Read from Linux
// sysfs (no library: hwloc or libnuma would do it, but sysfs gives the three numbers
// needed - core, package, node - in a few files, and the tests point it at a fake tree).
//
// Why: the CPU Adam kernels run at memory bandwidth; two threads on one core's
// hyper-threads share its load/store units, threads that migrate lose their caches, and
// on a two-socket host the pinned buffers the copy engine fills sit on the GPU's node.
// DeepSpeed reported 1.16-1.3x from pinning its CPU Adam (its PR #7474).
#pragma once

#include <string>
#include <vector>

namespace ps::optim {

// The CPUs this process may run on (sched_getaffinity), ascending.
std::vector<int> AllowedCpus();

// One CPU of `allowed` per physical core (the lowest-numbered sibling of each
// (package, core_id) pair), those of NUMA node `preferred_node` first (-1: no
// preference), then by node, then by CPU number. Reads
// `cpu_root`/cpuN/topology/{core_id,physical_package_id} and the cpuN/nodeM entries;
// a CPU whose topology cannot be read counts as its own core on node 0.
std::vector<int> PhysicalCoreCpus(const std::vector<int>& allowed, int preferred_node,
                                  const std::string& cpu_root = "/sys/devices/system/cpu");

// The NUMA node of PCI device `bus_id` ("0000:3b:00.0", any case), from
// `pci_root`/<bus_id>/numa_node; -1 when unknown (no such file, or the kernel says -1).
int PciNumaNode(const std::string& bus_id, const std::string& pci_root = "/sys/bus/pci/devices");

// The NUMA node of CUDA device `index` (PciNumaNode of its PCI bus id); -1 when unknown
// or in a build without CUDA.
int CudaDeviceNumaNode(int index);

}  // namespace ps::optim
