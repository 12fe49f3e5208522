// SliceUpdate (optim/device_slices.h): how the device update cuts a chunk into batches
// that fit its scratch. Scripted layouts against the contract: every updated element in
// exactly one piece and in order, no element of a parameter without a gradient in any
// batch, batches aligned and within the slice once rounded up, parameters split only
// where a batch is full.
#include <random>
#include <vector>

#include "optim/device_slices.h"
#include "tests/catch.h"

namespace ps::optim {
namespace {

int64_t AlignUp(int64_t n, int64_t a) { return (n + a - 1) / a * a; }

// Checks the contract of SliceUpdate(params, max, align) and returns its batches.
std::vector<SliceBatch> Checked(const std::vector<SliceParam>& params, int64_t max, int64_t align) {
  const std::vector<SliceBatch> batches = SliceUpdate(params, max, align);
  std::vector<SlicePiece> pieces;
  for (const SliceBatch& b : batches) {
    CHECK(b.begin_numel % align == 0);
    CHECK(AlignUp(b.end_numel - b.begin_numel, align) <= max);
    REQUIRE_FALSE(b.pieces.empty());
    CHECK(b.pieces.front().offset_numel == b.begin_numel);
    CHECK(b.pieces.back().offset_numel + b.pieces.back().numel == b.end_numel);
    for (const SlicePiece& p : b.pieces) {
      CHECK(p.numel > 0);
      pieces.push_back(p);
    }
    for (const SliceParam& q : params) {  // nothing of a parameter left as it is
      if (q.updated) continue;
      CHECK((q.offset_numel + q.numel <= b.begin_numel || q.offset_numel >= b.end_numel));
    }
  }
  size_t k = 0;
  for (const SliceParam& q : params) {
    if (!q.updated) continue;
    int64_t at = q.offset_numel;
    while (at < q.offset_numel + q.numel) {
      REQUIRE(k < pieces.size());
      CHECK(pieces[k].index == q.index);
      CHECK(pieces[k].offset_numel == at);
      at += pieces[k].numel;
      ++k;
    }
    CHECK(at == q.offset_numel + q.numel);
  }
  CHECK(k == pieces.size());
  return batches;
}

TEST_CASE("device slices: small parameters share a batch, a large one is split where batches fill",
          "[device_slices]") {
  // 256-aligned (8-bit state): 100 | gap | 300 | gap | 1000 elements, slice 512.
  const std::vector<SliceParam> params = {{0, 0, 100, true}, {1, 256, 300, true}, {2, 768, 1000, true}};
  const auto batches = Checked(params, 512, 256);
  REQUIRE(batches.size() == 4);
  CHECK(batches[0].begin_numel == 0);  // params 0 and 1: 556 elements, 768 rounded: too many
  CHECK(batches[0].pieces.size() == 2);
  CHECK(batches[0].end_numel == 512);  // param 1 split at the batch's end
  CHECK(batches[1].begin_numel == 512);
  CHECK(batches[1].pieces.size() == 2);  // the rest of param 1, then param 2's first 256
  CHECK(batches[2].begin_numel == 1024);
  CHECK(batches[3].end_numel == 1768);
}

TEST_CASE("device slices: a parameter without a gradient ends the batch", "[device_slices]") {
  const std::vector<SliceParam> params = {{0, 0, 10, true}, {1, 32, 10, false}, {2, 64, 10, true}};
  const auto batches = Checked(params, 1 << 20, 32);
  REQUIRE(batches.size() == 2);
  CHECK(batches[0].end_numel == 10);
  CHECK(batches[1].begin_numel == 64);
  CHECK(Checked({{0, 0, 10, false}}, 256, 1).empty());
}

TEST_CASE("device slices: one batch per run when the bound is the chunk", "[device_slices]") {
  const std::vector<SliceParam> params = {{0, 0, 40, true}, {1, 64, 40, true}, {2, 128, 40, true}};
  const auto batches = Checked(params, 256, 32);
  REQUIRE(batches.size() == 1);
  CHECK(batches[0].pieces.size() == 3);
}

TEST_CASE("device slices: the contract over random layouts", "[device_slices]") {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    const int64_t align = trial % 2 == 0 ? 256 : 1;
    const int64_t max = align * (1 + static_cast<int64_t>(rng() % 8)) * (align == 1 ? 64 : 1);
    std::vector<SliceParam> params;
    int64_t at = 0;
    for (int i = 0; i < 1 + static_cast<int>(rng() % 12); ++i) {
      const int64_t numel = 1 + static_cast<int64_t>(rng() % 2000);
      params.push_back({i, at, numel, rng() % 5 != 0});
      at = AlignUp(at + numel, align);
    }
    INFO("trial " << trial);
    Checked(params, max, align);
  }
}

TEST_CASE("device slices: a slice that is not a multiple of the alignment is refused", "[device_slices]") {
  CHECK_THROWS(SliceUpdate({{0, 0, 10, true}}, 300, 256));
  CHECK_THROWS(SliceUpdate({{0, 0, 10, true}}, 0, 1));
}

}  // namespace
}  // namespace ps::optim
