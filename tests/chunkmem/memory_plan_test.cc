// MemoryPlan arithmetic on a small hand-checked model: bytes per kind, the working set
// of the most demanding block (shared parameters included), the largest model the
// budgets hold, and the fit verdicts.
#include "chunkmem/memory_plan.h"
#include "tests/catch.h"

namespace ps::chunkmem {
namespace {

// Chunks of 1000 elements: [emb 600 (blocks 0 and 3)], [b1 900], [b2 500, b2' 400], [head 120].
PlanInput Small(int64_t element_bytes, int64_t device, int64_t host) {
  PlanInput in;
  in.params = {{"emb", 600, {0, 3}}, {"b1", 900, {1}}, {"b2", 500, {2}}, {"b2'", 400, {2}}, {"head", 120, {3}}};
  in.chunk_numel = 1000;
  in.compute_element_bytes = element_bytes;
  in.device_budget_bytes = device;
  in.host_budget_bytes = host;
  return in;
}

TEST_CASE("bytes per kind and per tier", "[plan]") {
  const auto plan = PlanMemory(Small(2, 10000, 1000000));
  REQUIRE(plan.layout.num_chunks() == 4);  // emb | b1 | b2 b2' | head (does not fit after b2' at 928)
  CHECK(plan.param_numel == 2520);
  CHECK(plan.compute_chunk_bytes == 4 * 1024 * 2);    // capacities aligned to 32: 1024
  CHECK(plan.host_only_bytes == 4 * 1024 * 16);       // grad + master + m + v
  CHECK(plan.device_bytes == 8192);                   // all compute chunks fit the device
  CHECK(plan.host_bytes == 4 * 1024 * 16);
  CHECK(plan.bytes_per_param == Approx(4 * 1024 * 18 / 2520.0));
  CHECK(plan.fits);
}

TEST_CASE("parameters outside the chunks cost 16 bytes each on the host", "[plan]") {
  PlanInput in = Small(2, 10000, 1000000);
  in.host_param_numel = 1000;  // e.g. CPU embeddings
  const auto plan = PlanMemory(in);
  CHECK(plan.host_param_bytes == 16000);
  CHECK(plan.host_bytes == 4 * 1024 * 16 + 16000);
  CHECK(FormatPlan(plan, in).find("outside chunks") != std::string::npos);
  in.host_budget_bytes = 4 * 1024 * 16 + 15999;  // one byte short
  CHECK_FALSE(PlanMemory(in).fits);
}

TEST_CASE("the working set includes chunks of shared parameters", "[plan]") {
  // Block 2 uses one chunk, plus the shared embedding's chunk: 2 chunks of 2 kB.
  const auto plan = PlanMemory(Small(2, 10000, 1000000));
  CHECK(plan.min_device_bytes == 2 * 1024 * 2);
  const auto tight = PlanMemory(Small(2, 4095, 1000000));
  CHECK_FALSE(tight.fits);
  CHECK(tight.why_not.find("below the largest block working set") != std::string::npos);
}

TEST_CASE("fp32 needs no separate master", "[plan]") {
  const auto plan = PlanMemory(Small(4, 10000, 1000000));
  CHECK(plan.compute_chunk_bytes == 4 * 1024 * 4);
  CHECK(plan.host_only_bytes == 4 * 1024 * 12);
}

TEST_CASE("compute chunks beyond the device budget count on the host", "[plan]") {
  const auto plan = PlanMemory(Small(2, 4096, 70000));
  CHECK(plan.device_bytes == 4096);
  CHECK(plan.host_bytes == 4 * 1024 * 16 + 4096);
  CHECK(plan.fits);
  const auto over = PlanMemory(Small(2, 4096, 65000));
  CHECK_FALSE(over.fits);
  CHECK(over.why_not.find("the host needs") != std::string::npos);
}

TEST_CASE("largest model: the budgets are exactly used at that size", "[plan]") {
  for (int64_t device : {int64_t{4096}, int64_t{1} << 20}) {
    const PlanInput in = Small(2, device, 1 << 22);
    const auto plan = PlanMemory(in);
    const double u = static_cast<double>(plan.layout.capacity_numel()) / plan.param_numel;
    const double n = static_cast<double>(plan.largest_param_numel);
    const double host_need = 16 * n * u + std::max(0.0, 2 * n * u - static_cast<double>(device));
    INFO("device " << device);
    CHECK(host_need == Approx(static_cast<double>(1 << 22)).epsilon(1e-6));
  }
}

TEST_CASE("byte counts that overflow int64 are errors, not negative sizes that fit", "[plan][overflow]") {
  PlanInput in;
  in.params = {{"huge", int64_t{1} << 61, {0}}};  // 2^61 elements x 4 bytes = 2^63 bytes
  in.chunk_numel = int64_t{1} << 61;
  in.compute_element_bytes = 4;
  in.device_budget_bytes = int64_t{1} << 40;
  in.host_budget_bytes = int64_t{1} << 40;
  CHECK_THROWS_WITH(PlanMemory(in), Catch::Contains("memory plan: 2305843009213693952 x 4 bytes overflows int64"));
  in.compute_element_bytes = 2;  // the compute chunk fits (2^62) but grad + m + v + master (16 bytes) do not
  CHECK_THROWS_WITH(PlanMemory(in), Catch::Contains("x 16 bytes overflows int64; the model is too large to plan"));
  in.params = {{"w", 1000, {0}}};
  in.chunk_numel = 1000;
  in.host_param_numel = int64_t{1} << 60;  // 16 bytes each on the host
  CHECK_THROWS_WITH(PlanMemory(in), Catch::Contains("16 x 1152921504606846976 bytes overflows int64"));
}

}  // namespace
}  // namespace ps::chunkmem
