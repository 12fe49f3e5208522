// LossScaler: the exact scale sequence of DeepSpeed's dynamic scaler for a scripted
// overflow pattern (hysteresis, window growth, min scale), static and off modes, bad
// settings, and the serialised state round trip.
#include "optim/loss_scaler.h"

#include <stdexcept>
#include <vector>

#include "tests/catch.h"

namespace ps::optim {
namespace {

PrecisionConfig Fp16(double loss_scale = 0.0) {
  PrecisionConfig c;
  c.dtype = Dtype::kFp16;
  c.loss_scale = loss_scale;
  c.initial_scale_power = 4;
  c.loss_scale_window = 3;
  c.hysteresis = 2;
  c.min_loss_scale = 2;
  return c;
}

TEST_CASE("dynamic scale follows DeepSpeed on a scripted overflow pattern", "[loss_scaler]") {
  LossScaler scaler(Fp16());
  REQUIRE(scaler.mode() == LossScaler::Mode::kDynamic);
  CHECK(scaler.scale() == 16);
  //                            0     1      2      3      4     5     6     7     8     9     10     11     12
  const std::vector<bool> overflow = {true, false, false, false, true, true, true, true, true, true, false, false, false};
  // First overflow only spends the hysteresis; three clean steps double and refill it;
  // then one overflow is tolerated again, after which every overflow halves (the
  // hysteresis stays spent until a window passes), floored at min_loss_scale.
  const std::vector<double> expected = {16, 16, 16, 32, 32, 16, 8, 4, 2, 2, 2, 2, 4};
  std::vector<double> scales;
  int skipped = 0;
  for (bool o : overflow) {
    skipped += scaler.Update(o) ? 1 : 0;
    scales.push_back(scaler.scale());
  }
  CHECK(scales == expected);
  CHECK(skipped == 7);
  CHECK(scaler.state().overflows == 7);
  CHECK(scaler.state().hysteresis_left == 2);
}

TEST_CASE("without overflows the scale doubles every window", "[loss_scaler]") {
  LossScaler scaler(Fp16());
  std::vector<double> scales;
  for (int i = 0; i < 7; ++i) {
    CHECK_FALSE(scaler.Update(false));
    scales.push_back(scaler.scale());
  }
  CHECK(scales == std::vector<double>{16, 16, 32, 32, 32, 64, 64});
}

TEST_CASE("hysteresis 1 halves on every overflow", "[loss_scaler]") {
  PrecisionConfig c = Fp16();
  c.hysteresis = 1;
  LossScaler scaler(c);
  scaler.Update(true);
  CHECK(scaler.scale() == 8);
  scaler.Update(true);
  CHECK(scaler.scale() == 4);
}

TEST_CASE("hysteresis counts scattered overflows unless consecutive_hysteresis", "[loss_scaler]") {
  const std::vector<bool> overflow = {true, false, true, false, true, true};
  auto run = [&](bool consecutive) {
    PrecisionConfig c = Fp16();
    c.consecutive_hysteresis = consecutive;
    LossScaler scaler(c);
    std::vector<double> scales;
    for (bool o : overflow) {
      scaler.Update(o);
      scales.push_back(scaler.scale());
    }
    return scales;
  };
  // DeepSpeed's default: the second overflow in a window halves, clean steps between
  // them do not refill the hysteresis.
  CHECK(run(false) == std::vector<double>{16, 16, 8, 8, 4, 2});
  // consecutive_hysteresis: each clean step refills it; only two overflows in a row halve.
  CHECK(run(true) == std::vector<double>{16, 16, 16, 16, 16, 8});
}

TEST_CASE("static scale never changes but overflowing steps are skipped", "[loss_scaler]") {
  LossScaler scaler(Fp16(/*loss_scale=*/128));
  CHECK(scaler.mode() == LossScaler::Mode::kStatic);
  CHECK(scaler.Update(true));
  CHECK_FALSE(scaler.Update(false));
  CHECK(scaler.scale() == 128);
  CHECK(scaler.state().overflows == 1);
}

TEST_CASE("bf16 and fp32 need no scaler", "[loss_scaler]") {
  PrecisionConfig c = Fp16();
  c.dtype = Dtype::kBf16;
  LossScaler scaler(c);
  CHECK_FALSE(scaler.enabled());
  CHECK(scaler.scale() == 1);
  CHECK_FALSE(scaler.Update(true));
}

TEST_CASE("bad settings are refused with the key", "[loss_scaler]") {
  PrecisionConfig c = Fp16();
  c.hysteresis = 0;
  CHECK_THROWS_WITH(LossScaler(c), Catch::Contains("precision.hysteresis"));
  c = Fp16();
  c.loss_scale_window = 0;
  CHECK_THROWS_WITH(LossScaler(c), Catch::Contains("precision.loss_scale_window"));
  c = Fp16();
  c.min_loss_scale = 0;
  CHECK_THROWS_WITH(LossScaler(c), Catch::Contains("precision.min_loss_scale"));
  c = Fp16();
  c.initial_scale_power = 65;
  CHECK_THROWS_WITH(LossScaler(c), Catch::Contains("precision.initial_scale_power"));
}

TEST_CASE("scaler state serialises and restores exactly", "[loss_scaler]") {
  LossScaler a(Fp16());
  for (bool o : {true, false, true, true}) a.Update(o);
  const std::string text = LossScaler::Serialize(a.state());
  LossScaler b(Fp16());
  b.Restore(LossScaler::Parse(text));
  for (bool o : {false, false, false, true, false}) CHECK(a.Update(o) == b.Update(o));
  CHECK(LossScaler::Serialize(a.state()) == LossScaler::Serialize(b.state()));
  CHECK_THROWS_WITH(LossScaler::Parse("scale=2 iteration=x last_overflow_iteration=0 hysteresis_left=1 overflows=0"),
                    Catch::Contains("'iteration'"));
  CHECK_THROWS_WITH(LossScaler::Parse("scale=2"), Catch::Contains("missing 'iteration'"));
  CHECK_THROWS_WITH(LossScaler::Parse("scale=-1 iteration=0 last_overflow_iteration=0 hysteresis_left=1 overflows=0"),
                    Catch::Contains("'scale'"));
}

}  // namespace
}  // namespace ps::optim
