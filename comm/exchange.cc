#include "comm/exchange.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstring>

namespace ps::comm {

int64_t AllReduceInt(Communicator& comm, int64_t value, ReduceOp op, at::Device device) {
  TORCH_CHECK(op != ReduceOp::kAvg, "AllReduceInt: avg of integers is not defined");
  at::Tensor t = at::full({1}, value, at::TensorOptions().dtype(at::kLong).device(device));
  comm.AllReduce(t, op)->Wait();
  return t.item<int64_t>();
}

std::vector<std::string> AllGatherStrings(Communicator& comm, const std::string& text, at::Device device) {
  const int world = comm.world_size();
  const auto on_device = at::TensorOptions().device(device);
  at::Tensor length = at::full({1}, static_cast<int64_t>(text.size()), on_device.dtype(at::kLong));
  at::Tensor lengths = at::empty({world}, on_device.dtype(at::kLong));
  comm.AllGather(lengths, length)->Wait();
  const at::Tensor host_lengths = lengths.cpu();
  const int64_t* len = host_lengths.data_ptr<int64_t>();
  const int64_t longest = std::max<int64_t>(1, *std::max_element(len, len + world));
  at::Tensor mine = at::zeros({longest}, at::kByte);
  if (!text.empty()) std::memcpy(mine.data_ptr(), text.data(), text.size());
  at::Tensor all = at::empty({world * longest}, on_device.dtype(at::kByte));
  comm.AllGather(all, mine.to(device))->Wait();
  const at::Tensor host_all = all.cpu();
  const char* bytes = static_cast<const char*>(host_all.data_ptr());
  std::vector<std::string> out;
  for (int r = 0; r < world; ++r) out.emplace_back(bytes + r * longest, static_cast<size_t>(len[r]));
  return out;
}

}  // namespace ps::comm
