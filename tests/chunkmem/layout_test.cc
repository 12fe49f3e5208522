// ChunkLayout: offsets, alignment, no overlap, blocks kept together, oversize
// parameters, padding to the world size, utilisation, and the auto chunk size.
#include <algorithm>

#include "chunkmem/layout.h"
#include "tests/catch.h"

namespace ps::chunkmem {
namespace {

// Checks the invariants every layout must satisfy (docs/chunkmem.md, invariant 1).
void CheckInvariants(const ChunkLayout& layout, const LayoutOptions& o) {
  const auto& pl = layout.placements();
  REQUIRE(pl.size() == layout.params().size());
  for (size_t i = 0; i < pl.size(); ++i) {
    INFO("param " << layout.params()[i].name);
    REQUIRE(pl[i].chunk_id >= 0);
    CHECK(pl[i].offset_numel % o.align_numel == 0);
    CHECK(pl[i].numel == layout.params()[i].numel);
    CHECK(pl[i].offset_numel + pl[i].numel <= layout.chunks()[pl[i].chunk_id].capacity_numel);
  }
  for (const auto& chunk : layout.chunks()) {
    CHECK(chunk.used_numel <= chunk.capacity_numel);
    int64_t end = 0;
    for (int idx : chunk.param_indices) {  // offset order, no overlap
      CHECK(pl[idx].offset_numel >= end);
      end = pl[idx].offset_numel + pl[idx].numel;
    }
    CHECK(end == chunk.used_numel);
  }
  CHECK(layout.num_chunks() % o.world_size == 0);
}

std::vector<ParamSpec> GptLike(int layers) {
  std::vector<ParamSpec> p = {{"wte", 1000 * 64, 0}, {"wpe", 128 * 64, 0}};
  for (int l = 1; l <= layers; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    for (const auto& [name, numel] : std::vector<std::pair<std::string, int64_t>>{
             {"ln_1.weight", 64}, {"ln_1.bias", 64}, {"attn.c_attn.weight", 64 * 192}, {"attn.c_attn.bias", 192},
             {"attn.c_proj.weight", 64 * 64}, {"attn.c_proj.bias", 64}, {"ln_2.weight", 64}, {"ln_2.bias", 64},
             {"mlp.c_fc.weight", 64 * 256}, {"mlp.c_fc.bias", 256}, {"mlp.c_proj.weight", 256 * 64},
             {"mlp.c_proj.bias", 64}}) {
      p.push_back({h + name, numel, l});
    }
  }
  p.push_back({"ln_f.weight", 64, layers + 1});
  p.push_back({"ln_f.bias", 64, layers + 1});
  return p;
}

TEST_CASE("a GPT-like model: invariants hold and blocks stay together", "[layout]") {
  const auto params = GptLike(6);
  const LayoutOptions o{70000, 1, 32};
  const auto layout = ChunkLayout::Plan(params, o);
  CheckInvariants(layout, o);
  // A block (~50k elements) never straddles two chunks when it fits in one.
  for (size_t i = 1; i < params.size(); ++i) {
    if (params[i].block_id == params[i - 1].block_id && params[i].block_id > 0) {
      CHECK(layout.placements()[i].chunk_id == layout.placements()[i - 1].chunk_id);
    }
  }
  CHECK(layout.param_numel() == [&] {
    int64_t n = 0;
    for (const auto& p : params) n += p.numel;
    return n;
  }());
  CHECK(layout.utilization_ratio() > 0.5);
  CHECK(layout.utilization_ratio() <= 1.0);
}

TEST_CASE("offsets are aligned even for odd sizes", "[layout]") {
  const LayoutOptions o{1000, 1, 32};
  const auto layout = ChunkLayout::Plan({{"a", 7, 0}, {"b", 33, 0}, {"c", 1, 0}}, o);
  CheckInvariants(layout, o);
  CHECK(layout.placements()[0].offset_numel == 0);
  CHECK(layout.placements()[1].offset_numel == 32);
  CHECK(layout.placements()[2].offset_numel == 96);
  CHECK(layout.chunks()[0].used_numel == 97);
}

TEST_CASE("a block that does not fit in the space left starts a new chunk", "[layout]") {
  const LayoutOptions o{100, 1, 1};
  const auto layout = ChunkLayout::Plan({{"a", 60, 0}, {"b", 30, 1}, {"c", 30, 1}}, o);
  CheckInvariants(layout, o);
  CHECK(layout.placements()[0].chunk_id == 0);
  CHECK(layout.placements()[1].chunk_id == 1);  // block 1 (60) would not fit after 60
  CHECK(layout.placements()[2].chunk_id == 1);
}

TEST_CASE("a block larger than a chunk splits at parameter boundaries", "[layout]") {
  const LayoutOptions o{100, 1, 1};
  const auto layout = ChunkLayout::Plan({{"a", 70, 1}, {"b", 70, 1}, {"c", 20, 1}}, o);
  CheckInvariants(layout, o);
  CHECK(layout.num_chunks() == 2);
  CHECK(layout.placements()[1].chunk_id == 1);
  CHECK(layout.placements()[2].chunk_id == 1);
}

TEST_CASE("a block larger than a chunk starts a new chunk instead of filling a leftover", "[layout]") {
  const LayoutOptions o{100, 1, 1};
  const auto layout = ChunkLayout::Plan({{"x", 30, 0}, {"a", 60, 1}, {"b", 60, 1}}, o);
  CheckInvariants(layout, o);
  CHECK(layout.placements()[1].chunk_id == 1);  // not into the 70 left in chunk 0
  CHECK(layout.placements()[2].chunk_id == 2);
  CHECK(layout.num_chunks() == 3);
}

TEST_CASE("a parameter larger than the chunk size gets a chunk of its own", "[layout]") {
  const LayoutOptions o{100, 1, 32};
  const auto layout = ChunkLayout::Plan({{"small", 10, 0}, {"huge", 250, 0}, {"after", 10, 0}}, o);
  CheckInvariants(layout, o);
  const auto& huge = layout.placements()[1];
  CHECK(layout.chunks()[huge.chunk_id].capacity_numel == 256);  // 250 aligned up to 32
  CHECK(layout.chunks()[huge.chunk_id].param_indices == std::vector<int>{1});
  CHECK(layout.placements()[0].chunk_id == layout.placements()[2].chunk_id);  // small ones share
  CHECK(layout.Summary().find("1 oversize") != std::string::npos);
}

TEST_CASE("the chunk count is padded to a multiple of the world size", "[layout]") {
  for (int64_t world : {1, 2, 3, 4, 8}) {
    const LayoutOptions o{100, world, 1};
    const auto layout = ChunkLayout::Plan({{"a", 90, 0}, {"b", 90, 1}, {"c", 90, 2}}, o);
    CheckInvariants(layout, o);
    const int64_t expected = (3 + world - 1) / world * world;
    CHECK(layout.num_chunks() == expected);
    CHECK(layout.capacity_numel() == expected * 100);
    CHECK(layout.waste_numel() == expected * 100 - 270);
    int padding = 0;
    for (const auto& c : layout.chunks()) padding += c.padding;
    CHECK(padding == expected - 3);
  }
}

TEST_CASE("bad inputs are refused", "[layout]") {
  CHECK_THROWS_WITH(ChunkLayout::Plan({{"a", 1, 0}}, {0, 1, 1}), Catch::Contains("chunk size must be > 0"));
  CHECK_THROWS_WITH(ChunkLayout::Plan({{"a", 0, 0}}, {10, 1, 1}), Catch::Contains("parameter 'a' has 0 elements"));
}

TEST_CASE("auto chunk size: at least the largest parameter, least waste", "[layout][auto]") {
  const auto params = GptLike(5);
  const int64_t chosen = ChooseChunkNumel(params, 2, 32);
  CHECK(chosen >= 64000);
  CHECK(chosen % 32 == 0);
  const int64_t chosen_waste = ChunkLayout::Plan(params, {chosen, 2, 32}).waste_numel();
  // No size in the searched range does better (brute force over every aligned size).
  for (int64_t size = 64000; size <= 128000; size += 32) {
    CHECK(ChunkLayout::Plan(params, {size, 2, 32}).waste_numel() >= chosen_waste);
  }
}

}  // namespace
}  // namespace ps::chunkmem

namespace ps::chunkmem {

TEST_CASE("frozen parameters get chunks of their own; beside them trainable chunks are trimmed", "[layout][frozen]") {
  // A LoRA-like model: per block a frozen weight and two small adapters, a frozen head.
  std::vector<ParamSpec> params = {{"embed", 6000, 0, true}};
  for (int b = 1; b <= 3; ++b) {
    const std::string p = "layers." + std::to_string(b) + ".";
    params.push_back({p + "q.weight", 4000, b, true});
    params.push_back({p + "q.lora_A.weight", 100, b, false});
    params.push_back({p + "q.lora_B.weight", 90, b, false});
    params.push_back({p + "norm.weight", 40, b, true});
  }
  params.push_back({"head", 6000, 4, true});
  const LayoutOptions o{10000, 1, 32};
  const ChunkLayout layout = ChunkLayout::Plan(params, o);
  int frozen_chunks = 0, trainable_chunks = 0;
  for (const auto& chunk : layout.chunks()) {
    frozen_chunks += chunk.frozen ? 1 : 0;
    trainable_chunks += chunk.frozen ? 0 : 1;
    for (int i : chunk.param_indices) CHECK(layout.params()[i].frozen == chunk.frozen);  // F1: never mixed
    // Trimmed: a trainable chunk's capacity is what it holds, aligned.
    if (!chunk.frozen) CHECK(chunk.capacity_numel == (chunk.used_numel + 31) / 32 * 32);
    if (chunk.frozen) CHECK(chunk.capacity_numel == 10016);
  }
  CHECK(trainable_chunks == 1);  // the six adapters together (a block of each fits)
  CHECK(frozen_chunks == 4);     // embed | blocks 1 and 2 | block 3 | head (rule 2 per class)
  // Each block's frozen parameters stay together.
  CHECK(layout.placements()[1].chunk_id == layout.placements()[4].chunk_id);

  // Without frozen parameters the layout is what it was (F1): no trimming, same chunks.
  std::vector<ParamSpec> none = params;
  for (auto& p : none) p.frozen = false;
  const ChunkLayout plain = ChunkLayout::Plan(none, o);
  for (const auto& chunk : plain.chunks()) CHECK_FALSE(chunk.frozen);
  CHECK(plain.chunks().front().capacity_numel == 10016);
  // Over several ranks nothing is trimmed (ZeRO gathers chunks of one size).
  const ChunkLayout two = ChunkLayout::Plan(params, {10000, 2, 32});
  for (const auto& chunk : two.chunks()) CHECK(chunk.capacity_numel == 10016);
}

}  // namespace ps::chunkmem
