// LR schedules: warm-up, constant/linear/cosine decay to min_lr, and the floor after.
#include <cmath>

#include "optim/lr_schedule.h"
#include "tests/catch.h"

namespace ps::optim {
namespace {

LrSchedule Make(ScheduleType type, int64_t warmup, int64_t decay, double min_lr, int64_t max_steps = 100) {
  LrScheduleConfig c;
  c.type = type;
  c.warmup_steps = warmup;
  c.decay_steps = decay;
  c.min_lr = min_lr;
  return LrSchedule(1.0, c, max_steps);
}

TEST_CASE("warm-up ramps linearly and never gives 0", "[lr]") {
  auto s = Make(ScheduleType::kConstant, 4, 0, 0.0);
  CHECK(s.LrAt(0) == Approx(0.25));
  CHECK(s.LrAt(1) == Approx(0.5));
  CHECK(s.LrAt(3) == Approx(1.0));
  CHECK(s.LrAt(50) == Approx(1.0));
}

TEST_CASE("cosine decays from lr to min_lr over decay_steps", "[lr]") {
  auto s = Make(ScheduleType::kCosine, 10, 20, 0.1);
  CHECK(s.LrAt(10) == Approx(1.0));
  CHECK(s.LrAt(20) == Approx(0.55));  // halfway: (1 + 0.1) / 2
  CHECK(s.LrAt(15) == Approx(0.1 + 0.45 * (1 + std::cos(M_PI * 0.25))));
  CHECK(s.LrAt(30) == Approx(0.1));
  CHECK(s.LrAt(1000) == Approx(0.1));
}

TEST_CASE("linear decays evenly; decay_steps 0 means until max_steps", "[lr]") {
  auto s = Make(ScheduleType::kLinear, 0, 0, 0.0, 100);
  CHECK(s.LrAt(0) == Approx(1.0));
  CHECK(s.LrAt(25) == Approx(0.75));
  CHECK(s.LrAt(100) == Approx(0.0).margin(1e-12));
  for (int64_t i = 1; i < 100; ++i) CHECK(s.LrAt(i) < s.LrAt(i - 1));
}

TEST_CASE("wsd: warm-up, stable at lr, linear decay over the last decay_steps", "[lr]") {
  auto s = Make(ScheduleType::kWsd, 5, 20, 0.1, 100);
  CHECK(s.LrAt(0) == Approx(0.2));
  CHECK(s.LrAt(5) == Approx(1.0));
  CHECK(s.LrAt(79) == Approx(1.0));
  CHECK(s.LrAt(80) == Approx(1.0 - 0.9 / 20));
  CHECK(s.LrAt(89) == Approx(1.0 - 0.9 * 10 / 20));
  CHECK(s.LrAt(99) == Approx(0.1));  // the last step reaches min_lr
  auto d = Make(ScheduleType::kWsd, 0, 0, 0.0, 100);  // default decay: the last 10%
  CHECK(d.LrAt(89) == Approx(1.0));
  CHECK(d.LrAt(90) == Approx(0.9));
  CHECK(d.LrAt(99) == Approx(0.0).margin(1e-12));
}

}  // namespace
}  // namespace ps::optim
