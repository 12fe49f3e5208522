// Metrics helpers: perplexity, the console's progress line (durations, thousands), and the
// numeric fields a metrics line hands to TensorBoard.
#include <cmath>
#include <limits>
#include <string>

#include "tests/catch.h"
#include "trainer/logging/metrics.h"

namespace ps::trainer {
namespace {

TEST_CASE("perplexity is exp of the mean loss", "[metrics]") {
  CHECK(Perplexity(0.0) == 1.0);
  CHECK(Perplexity(std::log(50.0)) == Approx(50.0));
  CHECK(Perplexity(std::log(256.0)) == Approx(256.0));  // a uniform guess over bytes
  CHECK(std::isinf(Perplexity(1000.0)));
  CHECK(std::isnan(Perplexity(std::numeric_limits<double>::quiet_NaN())));
  // Non-finite values are JSON null in metrics.jsonl.
  CHECK(JsonLine().Add("eval_perplexity", Perplexity(1000.0)).str() == "{\"eval_perplexity\": null}");
}

TEST_CASE("training FLOPs per token: 6 per parameter, 4 per frozen one, plus attention", "[metrics]") {
  // GPT-2 124M at T = 1024: 6 N + 12 L C T.
  const double full = TrainingFlopsPerToken(124439808, 0, 12, 768, 1024);
  CHECK(full == 6.0 * 124439808 + 12.0 * 12 * 768 * 1024);
  // LoRA: a frozen base costs forward (2) and the gradient through it (2), no weight gradient.
  const double lora = TrainingFlopsPerToken(124439808 + 811008, 124439808, 12, 768, 1024);
  CHECK(lora == 4.0 * 124439808 + 6.0 * 811008 + 12.0 * 12 * 768 * 1024);
}

TEST_CASE("durations read as the largest two units, rounded down", "[metrics]") {
  CHECK(FormatDuration(0) == "0s");
  CHECK(FormatDuration(45.9) == "45s");
  CHECK(FormatDuration(60) == "1m00s");
  CHECK(FormatDuration(92) == "1m32s");
  CHECK(FormatDuration(3599.9) == "59m59s");
  CHECK(FormatDuration(3600 + 5 * 60 + 59) == "1h05m");
  CHECK(FormatDuration(3 * 86400 + 4 * 3600 + 59) == "3d04h");
  CHECK(FormatDuration(-1) == "?");
  CHECK(FormatDuration(std::numeric_limits<double>::infinity()) == "?");
}

TEST_CASE("thousands separators", "[metrics]") {
  CHECK(FormatThousands(0) == "0");
  CHECK(FormatThousands(999.4) == "999");
  CHECK(FormatThousands(999.6) == "1,000");
  CHECK(FormatThousands(5400.4) == "5,400");
  CHECK(FormatThousands(1234567) == "1,234,567");
  CHECK(FormatThousands(-1234) == "-1,234");
  CHECK(FormatThousands(std::numeric_limits<double>::infinity()) == "inf");
}

TEST_CASE("the step line shows progress, throughput and the ETA", "[metrics]") {
  StepLine s;
  s.step = 120;
  s.max_steps = 600;
  s.loss = 2.31;
  s.lr = 3e-4;
  s.grad_norm = 0.8125;
  s.step_ms = 95.2;
  s.tokens_per_s = 5400.3;
  s.tflops = 0.0123;
  s.eta_s = 92.7;
  CHECK(FormatStepLine(s) ==
        "step 120/600 (20%) | loss 2.3100 | lr 3.000e-04 | norm 0.812 | 95 ms | 5,400 tok/s | 0.012 TFLOPS | "
        "ETA 1m32s");
  s.step = 599;
  CHECK(FormatStepLine(s).rfind("step 599/600 (99%) |", 0) == 0);  // 100% only at the end
  s.step = 600;
  s.eta_s = 0;
  const std::string last = FormatStepLine(s);
  CHECK(last.rfind("step 600/600 (100%) |", 0) == 0);
  CHECK(last.substr(last.size() - 6) == "ETA 0s");
}

TEST_CASE("a metrics line lists its numeric fields in order", "[metrics]") {
  JsonLine line;
  line.Add("step", int64_t{3}).Add("loss", 2.5).Add("device", std::string("cpu")).Add("ok", true);
  REQUIRE(line.numeric_fields().size() == 2);
  CHECK(line.numeric_fields()[0] == std::make_pair(std::string("step"), 3.0));
  CHECK(line.numeric_fields()[1] == std::make_pair(std::string("loss"), 2.5));
}

}  // namespace
}  // namespace ps::trainer
