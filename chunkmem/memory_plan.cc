#include "chunkmem/memory_plan.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdio>
#include <set>

namespace ps::chunkmem {
namespace {

std::string Bytes(double b) {
  char buf[32];
  if (b >= 1e18) return "unlimited";
  if (b >= 1024.0 * 1024 * 1024) {
    std::snprintf(buf, sizeof(buf), "%.2f GiB", b / (1024.0 * 1024 * 1024));
  } else {
    std::snprintf(buf, sizeof(buf), "%.2f MiB", b / (1024.0 * 1024));
  }
  return buf;
}

// Byte counts in int64, checked: a model too large to count is an error, never a
// wrapped (negative) size that then "fits".
int64_t MulBytes(int64_t a, int64_t b) {
  int64_t out = 0;
  TORCH_CHECK(!__builtin_mul_overflow(a, b, &out), "memory plan: ", a, " x ", b,
              " bytes overflows int64; the model is too large to plan");
  return out;
}

int64_t AddBytes(int64_t a, int64_t b) {
  int64_t out = 0;
  TORCH_CHECK(!__builtin_add_overflow(a, b, &out), "memory plan: ", a, " + ", b,
              " bytes overflows int64; the model is too large to plan");
  return out;
}

}  // namespace

MemoryPlan PlanMemory(const PlanInput& in) {
  MemoryPlan plan;
  std::vector<ParamSpec> specs;
  int max_block = 0;
  for (const auto& p : in.params) {
    specs.push_back({p.name, p.numel, p.used_by_blocks.front()});
    for (int b : p.used_by_blocks) max_block = std::max(max_block, b);
  }
  const int64_t chunk_numel = in.chunk_numel > 0 ? in.chunk_numel : ChooseChunkNumel(specs, 1);
  plan.layout = ChunkLayout::Plan(specs, {chunk_numel, 1, 32});
  plan.param_numel = plan.layout.param_numel();
  const int64_t capacity = plan.layout.capacity_numel();
  const int64_t k = in.compute_element_bytes;
  const int64_t host_per_element =
      (in.grads_in_compute_chunks ? 0 : 4 /*grad*/) + 4 /*m*/ + 4 /*v*/ + (k != 4 ? 4 /*master*/ : 0);
  plan.compute_chunk_bytes = MulBytes(capacity, k);
  plan.host_only_bytes = MulBytes(capacity, host_per_element);
  const int64_t model_chunk_bytes = AddBytes(plan.compute_chunk_bytes, plan.host_only_bytes);

  // Working set: chunks of block b's parameters plus chunks of shared parameters.
  std::set<int> shared;
  for (size_t i = 0; i < in.params.size(); ++i) {
    if (in.params[i].used_by_blocks.size() > 1) shared.insert(plan.layout.placements()[i].chunk_id);
  }
  for (int b = 0; b <= max_block; ++b) {
    std::set<int> chunks = shared;
    for (size_t i = 0; i < in.params.size(); ++i) {
      const auto& used = in.params[i].used_by_blocks;
      if (std::find(used.begin(), used.end(), b) != used.end()) chunks.insert(plan.layout.placements()[i].chunk_id);
    }
    int64_t bytes = 0;
    for (int c : chunks) bytes += plan.layout.chunks()[c].capacity_numel * k;  // <= compute_chunk_bytes
    plan.min_device_bytes = std::max(plan.min_device_bytes, bytes);
  }

  plan.device_bytes = std::min(in.device_budget_bytes, plan.compute_chunk_bytes);
  plan.host_param_bytes = MulBytes(16, in.host_param_numel);
  // host_only + compute - device <= model_chunk_bytes, which did not overflow.
  plan.host_bytes = AddBytes(plan.host_only_bytes + (plan.compute_chunk_bytes - plan.device_bytes), plan.host_param_bytes);
  plan.bytes_per_param = static_cast<double>(model_chunk_bytes) / plan.param_numel;

  // Largest N with host(N) = h N u + max(0, k N u - D) <= H, u = capacity per parameter.
  const double u = static_cast<double>(capacity) / plan.param_numel;
  const double H = static_cast<double>(in.host_budget_bytes), D = static_cast<double>(in.device_budget_bytes);
  const double h = static_cast<double>(host_per_element);
  const double n = H <= h * D / k ? H / (h * u) : (H + D) / ((h + k) * u);
  plan.largest_param_numel = static_cast<int64_t>(n);

  if (plan.min_device_bytes > in.device_budget_bytes) {
    plan.why_not = "the device budget " + Bytes(D) + " is below the largest block working set " +
                   Bytes(static_cast<double>(plan.min_device_bytes)) + " (lower chunk.size_elements or raise the budget)";
  } else if (plan.host_bytes > in.host_budget_bytes) {
    plan.why_not = "the host needs " + Bytes(static_cast<double>(plan.host_bytes)) + " but its budget is " + Bytes(H);
  }
  plan.fits = plan.why_not.empty();
  return plan;
}

std::string FormatPlan(const MemoryPlan& p, const PlanInput& in) {
  char buf[512];
  std::string out;
  std::snprintf(buf, sizeof(buf), "parameters        %.3f B (%lld)\n", p.param_numel / 1e9,
                static_cast<long long>(p.param_numel));
  out += buf;
  out += "chunks            " + p.layout.Summary() + "\n";
  if (p.layout.utilization_ratio() < 0.5) {
    out += "hint              most chunk capacity is padding; chunk.size_elements: auto picks the size with "
           "the least\n";
  }
  out += "compute chunks    " + Bytes(static_cast<double>(p.compute_chunk_bytes)) + " (" +
         std::to_string(in.compute_element_bytes) + " bytes/element; move between device and host)\n";
  out += std::string(in.grads_in_compute_chunks ? "master+m+v        " : "grad+master+m+v   ") +
         Bytes(static_cast<double>(p.host_only_bytes)) + " (host)" +
         (in.grads_in_compute_chunks ? "; gradients reuse the compute slots\n" : "\n");
  if (p.host_param_bytes > 0) {
    out += "outside chunks    " + Bytes(static_cast<double>(p.host_param_bytes)) + " (" +
           std::to_string(in.host_param_numel) + " fp32 host parameters: value, grad, m, v)\n";
  }
  std::snprintf(buf, sizeof(buf), "model data        %s in chunks = %.2f bytes/chunked parameter%s\n",
                Bytes(static_cast<double>(p.compute_chunk_bytes + p.host_only_bytes)).c_str(), p.bytes_per_param,
                p.host_param_bytes > 0 ? " (plus the parameters outside chunks)" : "");
  out += buf;
  if (in.non_model_bytes > 0) {
    out += "activations       ~" + Bytes(static_cast<double>(in.non_model_bytes)) + " (" + in.non_model_note + ")\n";
  }
  out += "device            " + Bytes(static_cast<double>(p.device_bytes)) + " of budget " +
         Bytes(static_cast<double>(in.device_budget_bytes)) + "; needs at least " +
         Bytes(static_cast<double>(p.min_device_bytes)) + " (largest block working set)\n";
  out += "host              " + Bytes(static_cast<double>(p.host_bytes)) + " of budget " +
         Bytes(static_cast<double>(in.host_budget_bytes)) + "\n";
  std::snprintf(buf, sizeof(buf), "largest model     %.3f B parameters in these budgets (same bytes/parameter)\n",
                p.largest_param_numel / 1e9);
  out += buf;
  out += p.fits ? "fits              yes\n" : "fits              NO: " + p.why_not + "\n";
  return out;
}

}  // namespace ps::chunkmem
