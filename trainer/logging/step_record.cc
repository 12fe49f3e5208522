#include "trainer/logging/step_record.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/stack.h>

namespace ps::trainer {

void AccuracyCounts::Add(const models::LossOutput& out) {
  if (!out.correct.defined()) return;
  correct = correct.defined() ? correct + out.correct : out.correct;
  counted = counted.defined() ? counted + out.counted : out.counted;
}

double AccuracyCounts::Share(comm::Communicator* comm) const {
  if (!correct.defined()) return std::numeric_limits<double>::quiet_NaN();
  at::Tensor both = at::stack({correct, counted}).to(at::kDouble);
  if (comm) comm->AllReduce(both, comm::ReduceOp::kSum)->Wait();
  const double n = both[1].item<double>();
  return n > 0 ? both[0].item<double>() / n : std::numeric_limits<double>::quiet_NaN();
}

}  // namespace ps::trainer
