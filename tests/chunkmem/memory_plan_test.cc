// MemoryPlan arithmetic on a small hand-checked model: bytes per kind, the working set
// of the most demanding block (shared parameters included), the optimizer state placed
// in the device margin, the largest model the budgets hold, and the fit verdicts with
// the budget and the shortfall named.
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
  CHECK(plan.host_bytes == 4 * 1024 * 16 + 8192);     // the host keeps room for every compute chunk
  CHECK(plan.bytes_per_param == Approx(4 * 1024 * 18 / 2520.0));
  CHECK(plan.fits);
}

TEST_CASE("parameters outside the chunks cost 16 bytes each on the host", "[plan]") {
  PlanInput in = Small(2, 10000, 1000000);
  in.host_param_numel = 1000;  // e.g. CPU embeddings
  const auto plan = PlanMemory(in);
  CHECK(plan.host_param_bytes == 16000);
  CHECK(plan.host_bytes == 4 * 1024 * 16 + 8192 + 16000);
  CHECK(FormatPlan(plan, in).find("outside chunks") != std::string::npos);
  in.host_budget_bytes = 4 * 1024 * 16 + 8192 + 15999;  // one byte short
  CHECK_FALSE(PlanMemory(in).fits);
}

TEST_CASE("the working set includes chunks of shared parameters", "[plan]") {
  // Block 2 uses one chunk, plus the shared embedding's chunk: 2 chunks of 2 kB.
  const auto plan = PlanMemory(Small(2, 10000, 1000000));
  CHECK(plan.min_device_bytes == 2 * 1024 * 2);
  const auto tight = PlanMemory(Small(2, 4095, 1000000));
  CHECK_FALSE(tight.fits);
  CHECK(tight.why_not ==
        "the device budget leaves 4095 bytes (0.00 MiB) for chunks, 1 bytes (0.00 MiB) short of the largest block "
        "working set of 4096 bytes (0.00 MiB) (lower chunk.size_elements or raise the device budget)");
}

TEST_CASE("fp32 needs no separate master", "[plan]") {
  const auto plan = PlanMemory(Small(4, 10000, 1000000));
  CHECK(plan.compute_chunk_bytes == 4 * 1024 * 4);
  CHECK(plan.host_only_bytes == 4 * 1024 * 12);
}

TEST_CASE("bf16 moments (optimizer.state_dtype): m and v at 2 bytes each; the tiers and the plan text follow", "[plan]") {
  PlanInput in = Small(2, 10000, 1000000);
  in.state_element_bytes = 2;
  const auto plan = PlanMemory(in);
  CHECK(plan.optimizer_bytes_per_element == 8);       // fp32 master + bf16 m + bf16 v
  CHECK(plan.host_only_bytes == 4 * 1024 * 12);       // grad 4 + master 4 + m 2 + v 2
  CHECK(plan.host_bytes == 4 * 1024 * 12 + 8192);
  CHECK(plan.bytes_per_param == Approx(4 * 1024 * 14 / 2520.0));
  CHECK(FormatPlan(plan, in).find("optimizer state 8 bytes/element, m and v bf16") != std::string::npos);
  in.grads_in_compute_chunks = true;  // bf16 with gradients in the compute slots: 10 bytes per element
  const auto reuse = PlanMemory(in);
  CHECK(reuse.compute_chunk_bytes + reuse.host_only_bytes == 4 * 1024 * 10);
  // The device margin takes optimizer state at its size, after the working set (4 kB)
  // and the device update's scratch (update_scratch.h, slices of the 1024-element
  // chunk: 6 bytes per element with fp32 moments, 14 with bf16 ones): where 2 of the 4
  // chunks' fp32 state fits (12 kB each), 3 of bf16 state do (8 kB each).
  PlanInput wide = Small(2, 4096 + 24576 + 14 * 1024, 1000000), narrow = wide;
  wide.margin_use_ratio = narrow.margin_use_ratio = 1.0;
  narrow.state_element_bytes = 2;
  const auto w = PlanMemory(wide), n = PlanMemory(narrow);
  CHECK(w.tiers.device_optimizer_chunks == 2);
  CHECK(w.tiers.device_scratch_bytes == 6 * 1024);
  CHECK(n.tiers.device_optimizer_chunks == 3);
  CHECK(n.tiers.device_scratch_bytes == 14 * 1024);
  // One byte less than the scratch needs beside them: a chunk fewer.
  narrow.device_budget_bytes -= 1;
  CHECK(PlanMemory(narrow).tiers.device_optimizer_chunks == 2);
}

TEST_CASE("int8 moments: codes and block scales; parameters block-aligned; the plan text says so", "[plan]") {
  PlanInput in = Small(2, 10000, 1000000);
  in.state_element_bytes = 1;
  const auto plan = PlanMemory(in);
  int64_t expect = 0;
  for (const auto& c : plan.layout.chunks()) {
    CHECK(c.capacity_numel % kStateBlockNumel == 0);
    // grad and master 4 each; m and v: codes, then 4 bytes per block rounded up to 64.
    expect += c.capacity_numel * 8 + 2 * (c.capacity_numel + (4 * (c.capacity_numel / 256) + 63) / 64 * 64);
  }
  for (const auto& p : plan.layout.placements()) CHECK(p.offset_numel % kStateBlockNumel == 0);
  CHECK(plan.host_only_bytes == expect);
  CHECK(plan.optimizer_bytes_per_element == Approx(static_cast<double>(expect) / plan.layout.capacity_numel() - 4));
  CHECK(FormatPlan(plan, in).find(" bytes/element, m and v int8") != std::string::npos);
}

TEST_CASE("master_weights none: no fp32 master, bf16 grad chunks: 2 + 2 + int8 moments per element",
          "[plan]") {
  PlanInput in = Small(2, 10000, 1000000);
  in.state_element_bytes = 1;
  in.master_weights = false;
  const auto plan = PlanMemory(in);
  int64_t moments = 0;
  for (const auto& c : plan.layout.chunks()) {
    moments += 2 * (c.capacity_numel + (4 * (c.capacity_numel / 256) + 63) / 64 * 64);
  }
  const int64_t capacity = plan.layout.capacity_numel();
  CHECK(plan.host_only_bytes == 2 * capacity + moments);  // grads 2 each, m and v; no master
  CHECK(plan.optimizer_bytes_per_element == Approx(static_cast<double>(moments) / capacity));
  CHECK(plan.compute_chunk_bytes == 2 * capacity);
  // 2 + 2 + 2 x (1 + scales): 6.125 here, where 1,024-element chunks round their 16
  // bytes of scales per moment up to 64.
  CHECK(static_cast<double>(plan.compute_chunk_bytes + plan.host_only_bytes) / capacity == Approx(6.125));
  CHECK(FormatPlan(plan, in).find("grad+m+v") != std::string::npos);
  CHECK(FormatPlan(plan, in).find("no fp32 master: bf16 weights and gradients") != std::string::npos);
  in.master_weights = true;  // the same run with a master: 4 more for it and 2 more for fp32 gradients
  CHECK(PlanMemory(in).host_only_bytes == plan.host_only_bytes + 6 * capacity);
}

TEST_CASE("the host keeps room for every compute chunk, whatever the device holds", "[plan]") {
  const auto plan = PlanMemory(Small(2, 4096, 73728));
  CHECK(plan.device_bytes == 4096);
  CHECK(plan.host_bytes == 4 * 1024 * 16 + 8192);  // start-up: every chunk on the host
  CHECK(plan.fits);
  const auto over = PlanMemory(Small(2, 4096, 73727));
  CHECK_FALSE(over.fits);
  CHECK(over.why_not.find("the host budget of 73727 bytes (0.07 MiB) is 1 bytes (0.00 MiB) short: the host holds "
                          "73728 bytes") == 0);
}

TEST_CASE("optimizer state goes to the device margin from start-up, in layout order", "[plan][tiers]") {
  // bf16: optimizer state (master, m, v) is 1024 x 12 = 12288 bytes per chunk; the
  // working set 4096. Device 30000: margin 0.8 x (30000 - 4096) = 20723 takes chunk 0.
  PlanInput in = Small(2, 30000, 1000000);
  in.margin_use_ratio = 0.8;
  const auto one = PlanMemory(in);
  CHECK(one.tiers.optimizer_on_device == std::vector<bool>{true, false, false, false});
  CHECK(one.tiers.device_optimizer_bytes == 12288);
  CHECK(one.device_bytes == 12288 + 8192);
  CHECK(one.host_bytes == 8192 + 4 * 4096 + 3 * 12288);  // compute, grads, 3 chunks' state
  // A device that takes all of it: the host holds compute and grad chunks only.
  in.device_budget_bytes = 100000;
  const auto all = PlanMemory(in);
  CHECK(all.tiers.device_optimizer_chunks == 4);
  CHECK(all.host_bytes == 8192 + 4 * 4096);
  // Hybrid off: none, whatever the margin.
  in.margin_use_ratio = 0.0;
  CHECK(PlanMemory(in).tiers.device_optimizer_chunks == 0);
  // PlanTiers itself, from the same input: the TierPlan the plan hands the runtime.
  in.margin_use_ratio = 0.8;
  const auto again = PlanTiers(all.layout, {{0, 3}, {1}, {2}, {2}, {3}}, TierPlanInputOf(in));
  CHECK(again.optimizer_on_device == all.tiers.optimizer_on_device);
  CHECK(again.host_bytes == all.host_bytes);
}

TEST_CASE("gradient chunks of chunks updated on the device: what the room leaves beside their state", "[plan][tiers]") {
  // bf16 with a master: per chunk state 12288 bytes and an fp32 gradient chunk of 4096;
  // working set 4096; scratch 1024 x 6 = 6144 kept off the state's margin. Device 60000:
  // 0.8 x (60000 - 4096 - 6144) = 39808 holds 3 chunks' state (36864); one chunk updates
  // on the host, so 3 flush slots (12288) stay free: 60000 - 4096 - 36864 - 12288 = 6752
  // holds one gradient chunk.
  PlanInput in = Small(2, 60000, 1000000);
  in.margin_use_ratio = 0.8;
  const auto some = PlanMemory(in);
  CHECK(some.tiers.device_optimizer_chunks == 3);
  CHECK(some.tiers.device_grad_chunks == 1);
  CHECK(some.tiers.crossing_grad_bytes == 2 * 4096);
  CHECK(FormatPlan(some, in).find("gradients         room beside that state for the gradient chunks of about 1 of "
                                  "those 3 chunks; the other 2 chunks' gradients (0.01 MiB) cross to the host") != std::string::npos);
  // Every chunk's state on the device: no flush slots. 72000: 0.8 x (72000 - 4096 - 6144)
  // = 49408 holds all four chunks' state (49152), and 72000 - 4096 - 49152 = 18752 all four
  // gradient chunks (16384; with the flush slots it would hold one).
  in.device_budget_bytes = 72000;
  const auto all = PlanMemory(in);
  CHECK(all.tiers.device_optimizer_chunks == 4);
  CHECK(all.tiers.device_grad_chunks == 4);
  CHECK(all.tiers.crossing_grad_bytes == 0);
  CHECK(FormatPlan(all, in).find("the gradient chunks of all 4 chunks updated on the device stay there") !=
        std::string::npos);
  // Every chunk's state on the device, but room for only two of the four gradient
  // chunks: the other two stage, so the flush slots are kept and none stays. Margin ratio
  // 1: 64000 - 4096 - 6144 = 53760 holds the four chunks' state; 64000 - 4096 - 49152 =
  // 10752 would hold two gradient chunks, less the slots (12288) none.
  in.device_budget_bytes = 64000;
  in.margin_use_ratio = 1.0;
  const auto tight = PlanMemory(in);
  CHECK(tight.tiers.device_optimizer_chunks == 4);
  CHECK(tight.tiers.device_grad_chunks == 0);
  CHECK(tight.tiers.crossing_grad_bytes == 4 * 4096);
  in.margin_use_ratio = 0.8;
  // Gradients in the compute slots: no gradient chunks, no line.
  in.grads_in_compute_chunks = true;
  const auto reuse = PlanMemory(in);
  CHECK(reuse.tiers.device_grad_chunks == 0);
  CHECK(FormatPlan(reuse, in).find("gradients   ") == std::string::npos);
}

TEST_CASE("KeepDeviceGrads: staging slots are kept unless every gradient chunk stays", "[plan][tiers]") {
  // All fit and none updates on the host: every one stays, no slots kept.
  CHECK(KeepDeviceGrads(300, 250, false, {100, 100, 100}) == std::vector<bool>{true, true, true});
  // A chunk updated on the host stages: the slots come first.
  CHECK(KeepDeviceGrads(300, 250, true, {100, 100, 100}) == std::vector<bool>{false, false, false});
  CHECK(KeepDeviceGrads(400, 250, true, {100, 100, 100}) == std::vector<bool>{true, false, false});
  // Not all fit: the ones left out stage, so the slots are kept too; in order, each that fits.
  CHECK(KeepDeviceGrads(299, 150, false, {100, 100, 100}) == std::vector<bool>{true, false, false});
  CHECK(KeepDeviceGrads(260, 100, false, {200, 100, 50}) == std::vector<bool>{false, true, true});
  CHECK(KeepDeviceGrads(0, 100, false, {}).empty());
}

TEST_CASE("NVMe tier: host memory keeps state while it fits (largest first), the rest goes to the file",
          "[plan][tiers][nvme]") {
  // bf16 as above: chunk 0's state on the device; chunks 1-3 host-updated, 12288 bytes of
  // state each (master 4096, m 4096, v 4096: already 4 KiB parts, so 12288 in the file).
  // Ring: 4 slots asked, one per chunk on the tier kept: 2 x (12288 + 4096) = 32768.
  // Compute 8192, grads 16384.
  PlanInput in = Small(2, 30000, 1000000);
  in.margin_use_ratio = 0.8;
  in.nvme = true;
  in.nvme_host_budget_bytes = 12288;  // stated: chunk 1 in RAM
  auto plan = PlanMemory(in);
  CHECK(plan.tiers.optimizer_on_device == std::vector<bool>{true, false, false, false});
  CHECK(plan.tiers.optimizer_on_nvme == std::vector<bool>{false, false, true, true});
  CHECK(plan.tiers.nvme_bytes == 2 * 12288);
  CHECK(plan.tiers.nvme_ring_slots == 2);
  CHECK(plan.tiers.nvme_ring_bytes == 32768);
  CHECK(plan.host_bytes == 8192 + 16384 + 12288 + 32768);
  CHECK_THAT(FormatPlan(plan, in), Catch::Contains("the optimizer state of 2 chunks in chunk.nvme_dir") &&
                                       Catch::Contains("through a ring of 2 slots") &&
                                       Catch::Contains("(2 of them in the NVMe tier)"));
  // Derived from the host budget (hybrid off: all four chunks host-updated, 49152 bytes
  // of state; a ring of 2 slots, 32768): without the ring the host would keep three
  // chunks' state, so the ring is needed, and with it one chunk's state fits.
  in.margin_use_ratio = 0.0;
  in.nvme_ring_slots = 2;
  in.nvme_host_budget_bytes = -1;
  in.host_budget_bytes = 8192 + 16384 + 32768 + 12288;
  plan = PlanMemory(in);
  CHECK(plan.tiers.optimizer_on_nvme == std::vector<bool>{false, true, true, true});
  CHECK(plan.tiers.nvme_ring_bytes == 32768);
  CHECK(plan.host_bytes == in.host_budget_bytes);
  CHECK(plan.fits);
  in.host_budget_bytes -= 1;  // one byte less: chunk 0 goes too
  plan = PlanMemory(in);
  CHECK(plan.tiers.optimizer_on_nvme == std::vector<bool>{true, true, true, true});
  CHECK(plan.host_bytes == 8192 + 16384 + 32768);
  CHECK(plan.fits);
  in.margin_use_ratio = 0.8;
  in.nvme_ring_slots = 4;
  // A host that keeps all of it: no file, no ring, the plan of a run without the tier.
  in.host_budget_bytes = 1000000;
  plan = PlanMemory(in);
  CHECK(plan.tiers.nvme_chunks == 0);
  CHECK(plan.tiers.nvme_ring_bytes == 0);
  CHECK(plan.host_bytes == 8192 + 16384 + 3 * 12288);
  CHECK_THAT(FormatPlan(plan, in), Catch::Contains("not needed"));
  // Too little host for the state, and the ring does not fit beside the compute and grad
  // chunks either: refused, naming the ring (every chunk's state on the tier: three
  // slots of the four asked, 49152 bytes, 36864 short).
  in.host_budget_bytes = 8192 + 16384 + 12288;
  plan = PlanMemory(in);
  CHECK_FALSE(plan.fits);
  CHECK(plan.tiers.nvme_chunks == 3);
  CHECK_THAT(plan.why_not, Catch::Contains("the NVMe tier's ring 49152 bytes") &&
                               Catch::Contains("is 36864 bytes (0.04 MiB) short"));
}

TEST_CASE("NVMe tier: the largest chunks stay in host memory first, so the ring's slots are regular ones",
          "[plan][tiers][nvme]") {
  // Chunks 0-4 of 1024 elements (12288 bytes of state, 12288 in the file each) and an
  // oversize chunk 5 of 2528 (30336 bytes of state; 36864 in the file). Hybrid off.
  PlanInput in = Small(2, 30000, 1000000);
  in.params.push_back({"big", 2500, {4}});
  in.nvme = true;
  in.nvme_ring_slots = 2;
  in.nvme_host_budget_bytes = 30336;  // the oversize chunk's state exactly
  const auto plan = PlanMemory(in);
  REQUIRE(plan.layout.num_chunks() == 6);  // five regular chunks, then the oversize one
  REQUIRE(plan.layout.chunks()[5].capacity_numel == 2528);
  CHECK(plan.tiers.optimizer_on_nvme == std::vector<bool>{true, true, true, true, true, false});
  CHECK(plan.tiers.nvme_ring_bytes == 2 * (12288 + 4096));  // not 2 x (36864 + 4096)
  CHECK(plan.tiers.nvme_bytes == 5 * 12288);
}

TEST_CASE("speculation slots are reserved only for chunks updated on the host", "[plan][tiers]") {
  // bf16: a slot is master, m, v and a compute copy of the largest chunk (1024): 14 bytes
  // per element, counted in fp32 chunks of 4096 bytes, rounded up.
  PlanInput in = Small(2, 30000, 1000000);
  in.margin_use_ratio = 0.8;
  in.speculation_slots = 12;
  in.backup_bytes_per_element = 14;
  const auto one = PlanMemory(in);  // chunk 0's state on the device: 3 chunks on the host
  CHECK(one.tiers.speculation_slots == 3);
  CHECK(one.host_bytes == 8192 + 4 * 4096 + 3 * 12288 + (3 * 14 + 3) / 4 * 4096);
  in.speculation_slots = 2;
  CHECK(PlanMemory(in).tiers.speculation_slots == 2);
  in.speculation_slots = 12;
  in.device_budget_bytes = 100000;  // every chunk's state on the device: no slot
  const auto all = PlanMemory(in);
  CHECK(all.tiers.speculation_slots == 0);
  CHECK(all.host_bytes == 8192 + 4 * 4096);
}

TEST_CASE("traced budget: the warm-up share comes on top of the pinned state, within the room", "[plan][tiers]") {
  PlanInput in = Small(2, 30000, 1000000);
  in.device_capacity_bytes = 100000;  // the traced capacity; 30000 is what the activations leave
  in.warmup_share_bytes = 10000;
  in.margin_use_ratio = 0.8;
  const auto plan = PlanMemory(in);
  CHECK(plan.tiers.device_optimizer_bytes == 12288);
  CHECK(plan.tiers.warmup_device_bytes == 12288 + 10000);
  in.warmup_share_bytes = 25000;  // more than the room left beside the pinned state
  CHECK(PlanMemory(in).tiers.warmup_device_bytes == 30000);
}

TEST_CASE("largest model: the budgets are exactly used at that size", "[plan]") {
  // bf16 with grad chunks: the host holds compute + grad (6 bytes) per capacity element,
  // and the optimizer state (12) less what the device margin A takes.
  for (int64_t device : {int64_t{4096}, int64_t{1} << 20, int64_t{1} << 24}) {
    PlanInput in = Small(2, device, 1 << 22);
    in.margin_use_ratio = 0.8;
    const auto plan = PlanMemory(in);
    const double u = static_cast<double>(plan.layout.capacity_numel()) / plan.param_numel;
    const double n = static_cast<double>(plan.largest_param_numel);
    const double a = 0.8 * static_cast<double>(device - plan.min_device_bytes);
    const double host_need = 6 * n * u + std::max(0.0, 12 * n * u - a);
    INFO("device " << device);
    CHECK(host_need == Approx(static_cast<double>(1 << 22)).epsilon(1e-5));  // N is whole parameters
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
  CHECK_THROWS_WITH(PlanMemory(in), Catch::Contains("bytes overflows int64"));
  in.params = {{"w", 1000, {0}}};
  in.chunk_numel = 1000;
  in.host_param_numel = int64_t{1} << 60;  // 16 bytes each on the host
  CHECK_THROWS_WITH(PlanMemory(in), Catch::Contains("16 x 1152921504606846976 bytes overflows int64"));
}

}  // namespace
}  // namespace ps::chunkmem

namespace ps::chunkmem {
namespace {

PlanInput ZeroRank(int64_t world, int64_t rank) {
  PlanInput in = Small(2, 1000000, 1000000);
  in.world_size = world;
  in.rank = rank;
  in.margin_use_ratio = 1.0;
  return in;
}

TEST_CASE("ZeRO: each of p ranks holds 1/p of the model data, and the ranks hold all of it", "[plan][zero]") {
  const auto one = PlanMemory(ZeroRank(1, 0));
  const int64_t one_data = one.compute_chunk_bytes + one.host_only_bytes;
  // bf16 with fp32 gradients: 2 + 4 + 12 = 18 bytes per element; one process holds 4 chunks.
  CHECK(one_data == 4 * 1024 * 18);
  for (int64_t p : {2, 4}) {
    int64_t compute = 0, host_only = 0;
    for (int64_t r = 0; r < p; ++r) {
      const auto plan = PlanMemory(ZeroRank(p, r));
      REQUIRE(plan.layout.num_chunks() == 4);  // a multiple of 2 and 4 already
      CHECK(plan.tiers.owned_chunks == 4 / p);
      CHECK(plan.compute_chunk_bytes + plan.host_only_bytes == one_data / p);
      CHECK(plan.bytes_per_param == Approx(one.bytes_per_param / static_cast<double>(p)));
      for (int c = 0; c < 4; ++c) {
        if (c % p != r) CHECK_FALSE(plan.tiers.optimizer_on_device[c]);  // only owned chunks' state
      }
      compute += plan.compute_chunk_bytes;
      host_only += plan.host_only_bytes;
    }
    CHECK(compute == one.compute_chunk_bytes);
    CHECK(host_only == one.host_only_bytes);
  }
  // With gradients in the compute slots (bf16, no accumulation): 14 / p bytes per element.
  PlanInput in = ZeroRank(2, 1);
  in.grads_in_compute_chunks = true;
  const auto reuse = PlanMemory(in);
  CHECK(reuse.compute_chunk_bytes + reuse.host_only_bytes == 2 * 1024 * 14);
}

TEST_CASE("ZeRO: the chunk count is padded to a multiple of the world size", "[plan][zero]") {
  int64_t compute = 0;
  for (int64_t r = 0; r < 3; ++r) {
    const auto plan = PlanMemory(ZeroRank(3, r));
    REQUIRE(plan.layout.num_chunks() == 6);  // 4 chunks + 2 padding chunks
    CHECK(plan.tiers.owned_chunks == 2);
    compute += plan.compute_chunk_bytes;
  }
  CHECK(compute == 6 * 1024 * 2);
  CHECK_THROWS_WITH(PlanMemory(ZeroRank(2, 2)), Catch::Contains("rank 2 of world size 2"));
}

TEST_CASE("ZeRO: a block's working set is its groups' owned chunk, gathered chunks and fp32 gradient buffer",
          "[plan][zero]") {
  // p = 2: groups {0, 1} and {2, 3}. Block 2 uses chunk 2 and the shared embedding's
  // chunk 0: two groups, each the owned chunk (2 kB), the gathered group (2 x 2 kB) and
  // its fp32 gradients (2 x 4 kB).
  const auto plan = PlanMemory(ZeroRank(2, 0));
  CHECK(plan.tiers.group_buffer_bytes == 2 * (2 * 1024 * 2 + 2 * 1024 * 4));
  CHECK(plan.min_device_bytes == 2 * 1024 * 2 + plan.tiers.group_buffer_bytes);
  CHECK(FormatPlan(plan, ZeroRank(2, 0)).find("ZeRO              rank 0 of 2 holds 2 of 4 chunks") !=
        std::string::npos);
  PlanInput tight = ZeroRank(2, 0);
  tight.device_budget_bytes = plan.min_device_bytes - 1;
  CHECK_FALSE(PlanMemory(tight).fits);
}

}  // namespace
}  // namespace ps::chunkmem
