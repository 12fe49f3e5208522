#include "comm/nccl_communicator.h"

#include <c10/util/Exception.h>

#ifdef PS_WITH_CUDA
#include <ATen/core/Tensor.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "comm/liveness.h"
#include "comm/store.h"
#endif

namespace ps::comm {

#ifndef PS_WITH_CUDA

std::unique_ptr<Communicator> MakeNcclCommunicator(const RankEnv& env, const DistributedConfig&) {
  TORCH_CHECK(false, "rank ", env.rank, ": CUDA tensors need the NCCL communicator, and this is a CPU build "
              "(build with --config=cuda)");
}

#else

namespace {

#define PS_NCCL_CHECK(expr, what)                                                              \
  do {                                                                                         \
    ncclResult_t ps_nccl_result = (expr);                                                      \
    TORCH_CHECK(ps_nccl_result == ncclSuccess || ps_nccl_result == ncclInProgress, what,       \
                ": NCCL error in " #expr ": ", ncclGetErrorString(ps_nccl_result));            \
  } while (0)

#define PS_CUDA_CHECK(expr, what)                                                             \
  do {                                                                                        \
    cudaError_t ps_cuda_result = (expr);                                                      \
    TORCH_CHECK(ps_cuda_result == cudaSuccess, what, ": CUDA error in " #expr ": ",           \
                cudaGetErrorString(ps_cuda_result));                                          \
  } while (0)

using Clock = std::chrono::steady_clock;

ncclDataType_t NcclType(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return ncclFloat32;
    case at::kHalf: return ncclFloat16;
    case at::kBFloat16: return ncclBfloat16;
    case at::kDouble: return ncclFloat64;
    case at::kLong: return ncclInt64;
    case at::kInt: return ncclInt32;
    case at::kByte: return ncclUint8;
    default: TORCH_CHECK(false, "NCCL: unsupported dtype ", t);
  }
}

ncclRedOp_t NcclOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kAvg: return ncclAvg;
    case ReduceOp::kMax: return ncclMax;
  }
  return ncclSum;
}

// State shared by the communicator and its Work objects.
struct NcclShared {
  ncclComm_t comm = nullptr;
  int rank = 0, world = 1;
  std::chrono::milliseconds timeout{0};
  std::unique_ptr<Heartbeat> heartbeat;
  std::string broken;
};

// Polls until `done()` or the deadline, checking the communicator's async error.
void PollNccl(NcclShared& s, const std::string& what, std::chrono::milliseconds timeout,
              const std::function<bool()>& done) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(s.comm, &async);
    if (async != ncclSuccess && async != ncclInProgress) {
      ncclCommAbort(s.comm);
      s.broken = "rank " + std::to_string(s.rank) + "/" + std::to_string(s.world) + ": " + what +
                 " failed: " + ncclGetErrorString(async) + (s.heartbeat ? "; " + s.heartbeat->Diagnose() : "");
      TORCH_CHECK(false, s.broken);
    }
    if (async == ncclSuccess && done()) return;
    if (Clock::now() > deadline) {
      ncclCommAbort(s.comm);
      s.broken = "rank " + std::to_string(s.rank) + "/" + std::to_string(s.world) + ": " + what + " timed out after " +
                 std::to_string(timeout.count() / 1000) + " s" + (s.heartbeat ? "; " + s.heartbeat->Diagnose() : "");
      TORCH_CHECK(false, s.broken);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

class NcclWork final : public Work {
 public:
  NcclWork(std::shared_ptr<NcclShared> s, std::string what, cudaEvent_t event, std::vector<at::Tensor> keep)
      : s_(std::move(s)), what_(std::move(what)), event_(event), keep_(std::move(keep)) {}
  ~NcclWork() override { cudaEventDestroy(event_); }
  void Wait() override {
    if (done_) return;
    PollNccl(*s_, what_, s_->timeout, [this] { return cudaEventQuery(event_) == cudaSuccess; });
    PS_CUDA_CHECK(cudaStreamWaitEvent(c10::cuda::getCurrentCUDAStream().stream(), event_, 0), what_);
    keep_.clear();
    done_ = true;
  }

 private:
  std::shared_ptr<NcclShared> s_;
  std::string what_;
  cudaEvent_t event_;
  std::vector<at::Tensor> keep_;  // alive until the collective is done
  bool done_ = false;
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(const RankEnv& env, const DistributedConfig& config) : env_(env) {
    shared_ = std::make_shared<NcclShared>();
    shared_->rank = env.rank;
    shared_->world = env.world_size;
    shared_->timeout = std::chrono::seconds(config.timeout_s);
    int devices = 0;
    PS_CUDA_CHECK(cudaGetDeviceCount(&devices), "rank " + std::to_string(env.rank));
    TORCH_CHECK(devices > 0, "rank ", env.rank, ": no CUDA device");
    device_ = env.local_rank % devices;
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_));
    stream_ = c10::cuda::getStreamFromPool(/*isHighPriority=*/true, static_cast<c10::DeviceIndex>(device_));
    const std::string who = "rank " + std::to_string(env.rank) + "/" + std::to_string(env.world_size);
    ncclUniqueId id;
    if (env.world_size > 1) {
      const std::chrono::milliseconds init_timeout = std::chrono::seconds(config.init_timeout_s);
      store_ = ConnectStore(env, init_timeout);
      shared_->heartbeat = std::make_unique<Heartbeat>(
          store_, env.rank, env.world_size, env.master_addr + ":" + std::to_string(env.master_port));
      if (env.rank == 0) {
        PS_NCCL_CHECK(ncclGetUniqueId(&id), who);
        const auto* p = reinterpret_cast<const uint8_t*>(&id);
        store_->set("ps/nccl_id", std::vector<uint8_t>(p, p + sizeof(id)));
      } else {
        const auto bytes = store_->get("ps/nccl_id");  // waits up to init_timeout_s
        TORCH_CHECK(bytes.size() == sizeof(id), who, ": the NCCL id in the store has ", bytes.size(), " bytes");
        std::memcpy(&id, bytes.data(), sizeof(id));
      }
    } else {
      PS_NCCL_CHECK(ncclGetUniqueId(&id), who);
    }
    ncclConfig_t nccl_config = NCCL_CONFIG_INITIALIZER;
    nccl_config.blocking = 0;
    PS_NCCL_CHECK(ncclCommInitRankConfig(&shared_->comm, env.world_size, id, env.rank, &nccl_config), who);
    PollNccl(*shared_, "ncclCommInitRank", std::chrono::seconds(config.init_timeout_s), [] { return true; });
  }

  ~NcclCommunicator() override {
    if (shared_->comm != nullptr && shared_->broken.empty()) ncclCommDestroy(shared_->comm);
  }

  int rank() const override { return env_.rank; }
  int world_size() const override { return env_.world_size; }
  const char* backend() const override { return "nccl"; }

  WorkPtr AllReduce(at::Tensor t, ReduceOp op) override {
    Check(t, "all_reduce");
    return Launch("all_reduce", {t}, [&](cudaStream_t s) {
      return ncclAllReduce(t.data_ptr(), t.data_ptr(), t.numel(), NcclType(t.scalar_type()), NcclOp(op),
                           shared_->comm, s);
    });
  }
  WorkPtr Broadcast(at::Tensor t, int root) override {
    Check(t, "broadcast");
    return Launch("broadcast", {t}, [&](cudaStream_t s) {
      return ncclBroadcast(t.data_ptr(), t.data_ptr(), t.numel(), NcclType(t.scalar_type()), root, shared_->comm, s);
    });
  }
  WorkPtr AllGather(at::Tensor out, at::Tensor in) override {
    Check(out, "all_gather");
    Check(in, "all_gather");
    TORCH_CHECK(out.numel() == in.numel() * env_.world_size, "all_gather: out must be world size x in");
    return Launch("all_gather", {out, in}, [&](cudaStream_t s) {
      return ncclAllGather(in.data_ptr(), out.data_ptr(), in.numel(), NcclType(in.scalar_type()), shared_->comm, s);
    });
  }
  WorkPtr ReduceScatter(at::Tensor out, at::Tensor in, ReduceOp op) override {
    Check(out, "reduce_scatter");
    Check(in, "reduce_scatter");
    TORCH_CHECK(in.numel() == out.numel() * env_.world_size, "reduce_scatter: in must be world size x out");
    return Launch("reduce_scatter", {out, in}, [&](cudaStream_t s) {
      return ncclReduceScatter(in.data_ptr(), out.data_ptr(), out.numel(), NcclType(in.scalar_type()), NcclOp(op),
                               shared_->comm, s);
    });
  }
  WorkPtr Barrier() override {
    // NCCL has no barrier: an all-reduce of one element stands in for it.
    barrier_ = at::zeros({1}, at::TensorOptions().device(at::kCUDA, device_));
    return AllReduce(barrier_, ReduceOp::kSum);
  }

 private:
  void Check(const at::Tensor& t, const char* op) const {
    TORCH_CHECK(t.is_cuda() && t.get_device() == device_, "rank ", env_.rank, ": ", op, " on NCCL needs a tensor on ",
                "cuda:", device_, ", got ", t.device().str());
    TORCH_CHECK(t.is_contiguous(), "rank ", env_.rank, ": ", op, " needs a contiguous tensor");
    TORCH_CHECK(shared_->broken.empty(), "rank ", env_.rank, ": ", op, " not run: ", shared_->broken);
  }

  WorkPtr Launch(const std::string& op, std::vector<at::Tensor> tensors,
                 const std::function<ncclResult_t(cudaStream_t)>& call) {
    const std::string what = op + " (call " + std::to_string(++calls_) + ")";
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_));
    cudaEvent_t ready, done;
    PS_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), what);
    PS_CUDA_CHECK(cudaEventRecord(ready, c10::cuda::getCurrentCUDAStream(device_).stream()), what);
    PS_CUDA_CHECK(cudaStreamWaitEvent(stream_.stream(), ready, 0), what);
    cudaEventDestroy(ready);
    PS_NCCL_CHECK(call(stream_.stream()), "rank " + std::to_string(env_.rank) + ": " + what);
    PS_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), what);
    PS_CUDA_CHECK(cudaEventRecord(done, stream_.stream()), what);
    return std::make_shared<NcclWork>(shared_, what, done, std::move(tensors));
  }

  RankEnv env_;
  int device_ = 0;
  c10::cuda::CUDAStream stream_{c10::cuda::getDefaultCUDAStream()};
  c10::intrusive_ptr<c10d::Store> store_;
  std::shared_ptr<NcclShared> shared_;
  at::Tensor barrier_;
  int64_t calls_ = 0;
};

}  // namespace

std::unique_ptr<Communicator> MakeNcclCommunicator(const RankEnv& env, const DistributedConfig& config) {
  return std::make_unique<NcclCommunicator>(env, config);
}

#endif  // PS_WITH_CUDA

}  // namespace ps::comm
