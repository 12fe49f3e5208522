#include "comm/gloo_communicator.h"

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>
#include <dlfcn.h>
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <unistd.h>

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

#include "comm/liveness.h"
#include "comm/store.h"

namespace ps::comm {
namespace {

std::string ErrorText(const std::exception& e) {
  if (auto* c = dynamic_cast<const c10::Error*>(&e)) return c->what_without_backtrace();
  return e.what();
}

// Gloo's rendezvous store interface over the c10d store.
class GlooStoreAdapter final : public gloo::rendezvous::Store {
 public:
  GlooStoreAdapter(c10::intrusive_ptr<c10d::Store> store, std::chrono::milliseconds timeout)
      : store_(std::move(store)), timeout_(timeout) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    store_->set("gloo/" + key, std::vector<uint8_t>(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    const auto v = store_->get("gloo/" + key);
    return std::vector<char>(v.begin(), v.end());
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    std::vector<std::string> prefixed;
    for (const auto& k : keys) prefixed.push_back("gloo/" + k);
    store_->wait(prefixed, timeout);
  }

 private:
  c10::intrusive_ptr<c10d::Store> store_;
  std::chrono::milliseconds timeout_;
};

bool IsLoopback(const std::string& host) {
  return host == "127.0.0.1" || host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

// Where this rank's Gloo listens: loopback for a one-node run on 127.0.0.1, else the
// interface GLOO_SOCKET_IFNAME names, else this host's name.
gloo::transport::tcp::attr DeviceAttr(const RankEnv& env) {
  gloo::transport::tcp::attr attr;
  if (const char* iface = std::getenv("GLOO_SOCKET_IFNAME")) {
    attr.iface = iface;
  } else if (IsLoopback(env.master_addr)) {
    attr.hostname = "127.0.0.1";
  } else {
    char name[256] = {};
    TORCH_CHECK(gethostname(name, sizeof(name) - 1) == 0, "rank ", env.rank, ": gethostname failed");
    attr.hostname = name;
  }
  return attr;
}

// The gloo:: symbols this file calls must be Debian's libgloo.so, not the copies inside
// libtorch_cpu.so (another Gloo revision with other struct layouts).
void CheckGlooSymbolsResolveToLibgloo() {
  Dl_info info{};
  void (*fn)(const gloo::AllreduceOptions&) = &gloo::allreduce;
  TORCH_CHECK(dladdr(reinterpret_cast<void*>(fn), &info) != 0 && info.dli_fname != nullptr,
              "cannot tell which library gloo::allreduce comes from");
  const std::string lib = info.dli_fname;
  TORCH_CHECK(lib.find("libgloo") != std::string::npos,
              "gloo::allreduce resolves to ", lib, ", not Debian's libgloo.so: link @system_libs//:gloo before "
              "LibTorch (libtorch_cpu.so carries another Gloo revision)");
}

template <typename T>
gloo::AllreduceOptions::Func ReduceFn(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return [](void* c, const void* a, const void* b, size_t n) {
        gloo::sum<T>(c, a, b, n);
      };
    case ReduceOp::kMax:
      return [](void* c, const void* a, const void* b, size_t n) {
        gloo::max<T>(c, a, b, n);
      };
  }
  TORCH_INTERNAL_ASSERT(false);
}

std::string Shape(const at::Tensor& t) {
  return std::string(c10::toString(t.scalar_type())) + "[" + std::to_string(t.numel()) + "]";
}

class FutureWork final : public Work {
 public:
  explicit FutureWork(std::shared_future<void> done) : done_(std::move(done)) {}
  void Wait() override { done_.get(); }

 private:
  std::shared_future<void> done_;
};

}  // namespace

struct GlooState {
  c10::intrusive_ptr<c10d::Store> store;
  std::unique_ptr<Heartbeat> heartbeat;
  std::shared_ptr<gloo::Context> context;
  std::chrono::milliseconds timeout{0};
  uint32_t next_tag = 0;
  int64_t calls = 0;
  std::string broken;  // the first failure: later calls fail at once with it

  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<void()>> queue;
  bool stop = false;
  std::thread worker;
};

GlooCommunicator::GlooCommunicator(const RankEnv& env, const DistributedConfig& config)
    : env_(env), state_(std::make_unique<GlooState>()) {
  GlooState& s = *state_;
  s.timeout = std::chrono::seconds(config.timeout_s);
  if (env_.world_size > 1) {
    CheckGlooSymbolsResolveToLibgloo();
    const std::chrono::milliseconds init_timeout = std::chrono::seconds(config.init_timeout_s);
    s.store = ConnectStore(env_, init_timeout);
    const std::string where = env_.master_addr + ":" + std::to_string(env_.master_port);
    s.heartbeat = std::make_unique<Heartbeat>(s.store, env_.rank, env_.world_size, where);
    try {
      auto device = gloo::transport::tcp::CreateDevice(DeviceAttr(env_));
      auto context = std::make_shared<gloo::rendezvous::Context>(env_.rank, env_.world_size);
      context->setTimeout(init_timeout);
      GlooStoreAdapter adapter(s.store, init_timeout);
      context->connectFullMesh(adapter, device);
      context->setTimeout(s.timeout);
      s.context = context;
    } catch (const std::exception& e) {
      TORCH_CHECK(false, "rank ", env_.rank, "/", env_.world_size, ": Gloo could not connect to every rank (store ",
                  where, "): ", ErrorText(e), "; ", s.heartbeat->Diagnose());
    }
  }
  s.worker = std::thread([&s] {
    std::unique_lock<std::mutex> lock(s.mu);
    for (;;) {
      s.cv.wait(lock, [&s] { return s.stop || !s.queue.empty(); });
      if (s.queue.empty()) return;  // stop, and nothing left
      auto task = std::move(s.queue.front());
      s.queue.pop_front();
      lock.unlock();
      task();
      lock.lock();
    }
  });
}

GlooCommunicator::~GlooCommunicator() {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->stop = true;
  }
  state_->cv.notify_all();
  state_->worker.join();
  GlooState& s = *state_;
  s.heartbeat.reset();
  // Rank 0 serves the store: it leaves last, so no rank's heartbeat or teardown finds
  // the store gone (best effort, bounded; skipped after a failure, and while an error
  // unwinds this rank: the others may be waiting in a collective this rank never joins).
  if (s.store && s.broken.empty() && std::uncaught_exceptions() == 0) {
    try {
      s.store->add("ps/leaving", 1);
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (env_.rank == 0 && s.store->add("ps/leaving", 0) < env_.world_size &&
             std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    } catch (const std::exception&) {
      // a destructor never throws; the run is over anyway
    }
  }
}

namespace {

// Queues `run` (given the Gloo context and a fresh tag) on the worker thread. A failure
// becomes a c10::Error naming this rank, the call and the rank that stopped answering.
WorkPtr Enqueue(GlooState& s, const RankEnv& env, std::string what,
                std::function<void(const std::shared_ptr<gloo::Context>&, uint32_t)> run) {
  auto promise = std::make_shared<std::promise<void>>();
  auto work = std::make_shared<FutureWork>(promise->get_future().share());
  const int64_t call = ++s.calls;
  const uint32_t tag = s.next_tag++;
  auto task = [&s, env, what = std::move(what), run = std::move(run), promise, call, tag] {
    try {
      TORCH_CHECK(s.broken.empty(), "rank ", env.rank, "/", env.world_size, ": ", what, " not run: an earlier call failed (",
                  s.broken, ")");
      run(s.context, tag);
      promise->set_value();
    } catch (const std::exception& e) {
      std::string message = ErrorText(e);
      if (s.broken.empty()) {
        message = "rank " + std::to_string(env.rank) + "/" + std::to_string(env.world_size) + ": " + what + " (call " +
                  std::to_string(call) + ") failed: " + message;
        if (s.heartbeat) message += "; " + s.heartbeat->Diagnose();
        s.broken = message;
      }
      promise->set_exception(std::make_exception_ptr(c10::Error(message)));
    }
  };
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.queue.push_back(std::move(task));
  }
  s.cv.notify_one();
  return work;
}

void CheckTensor(const at::Tensor& t, const RankEnv& env, const char* op) {
  TORCH_CHECK(t.device().is_cpu(), "rank ", env.rank, ": ", op, " on Gloo needs a CPU tensor, got ", t.device().str());
  TORCH_CHECK(t.is_contiguous(), "rank ", env.rank, ": ", op, " needs a contiguous tensor");
}

void AllReduceNow(const std::shared_ptr<gloo::Context>& ctx, uint32_t tag, std::chrono::milliseconds timeout,
                  at::Tensor& t, ReduceOp op, int world) {
  if (ctx == nullptr || t.numel() == 0) return;
  gloo::AllreduceOptions opts(ctx);
  opts.setTag(tag);
  opts.setTimeout(timeout);
  switch (t.scalar_type()) {
    case at::kFloat: opts.setOutput(t.data_ptr<float>(), t.numel()); opts.setReduceFunction(ReduceFn<float>(op)); break;
    case at::kDouble: opts.setOutput(t.data_ptr<double>(), t.numel()); opts.setReduceFunction(ReduceFn<double>(op)); break;
    case at::kLong: opts.setOutput(t.data_ptr<int64_t>(), t.numel()); opts.setReduceFunction(ReduceFn<int64_t>(op)); break;
    case at::kInt: opts.setOutput(t.data_ptr<int32_t>(), t.numel()); opts.setReduceFunction(ReduceFn<int32_t>(op)); break;
    default: TORCH_CHECK(false, "Gloo reductions take float32, float64, int32 or int64, got ", t.scalar_type());
  }
  gloo::allreduce(opts);
  if (op == ReduceOp::kAvg) t.div_(world);
}

}  // namespace

WorkPtr GlooCommunicator::AllReduce(at::Tensor tensor, ReduceOp op) {
  CheckTensor(tensor, env_, "all_reduce");
  TORCH_CHECK(op != ReduceOp::kAvg || at::isFloatingType(tensor.scalar_type()), "all_reduce avg needs a float tensor");
  const auto timeout = state_->timeout;
  const int world = env_.world_size;
  return Enqueue(*state_, env_, std::string("all_reduce ") + ToString(op) + " " + Shape(tensor),
                 [tensor, op, timeout, world](const std::shared_ptr<gloo::Context>& ctx, uint32_t tag) mutable {
                   AllReduceNow(ctx, tag, timeout, tensor, op, world);
                 });
}

WorkPtr GlooCommunicator::Broadcast(at::Tensor tensor, int root) {
  CheckTensor(tensor, env_, "broadcast");
  TORCH_CHECK(root >= 0 && root < env_.world_size, "broadcast root ", root, " not in [0, ", env_.world_size, ")");
  const auto timeout = state_->timeout;
  return Enqueue(*state_, env_, "broadcast from rank " + std::to_string(root) + " " + Shape(tensor),
                 [tensor, root, timeout](const std::shared_ptr<gloo::Context>& ctx, uint32_t tag) {
                   if (ctx == nullptr || tensor.numel() == 0) return;
                   gloo::BroadcastOptions opts(ctx);
                   opts.setTag(tag);
                   opts.setTimeout(timeout);
                   opts.setRoot(root);
                   opts.setOutput(static_cast<uint8_t*>(tensor.data_ptr()), tensor.nbytes());
                   gloo::broadcast(opts);
                 });
}

WorkPtr GlooCommunicator::AllGather(at::Tensor out, at::Tensor in) {
  CheckTensor(out, env_, "all_gather");
  CheckTensor(in, env_, "all_gather");
  TORCH_CHECK(out.scalar_type() == in.scalar_type() && out.numel() == in.numel() * env_.world_size,
              "all_gather: out ", Shape(out), " must be world size ", env_.world_size, " x in ", Shape(in));
  const auto timeout = state_->timeout;
  return Enqueue(*state_, env_, "all_gather " + Shape(in),
                 [out, in, timeout](const std::shared_ptr<gloo::Context>& ctx, uint32_t tag) mutable {
                   if (ctx == nullptr) {
                     out.copy_(in.view_as(out));
                     return;
                   }
                   if (in.numel() == 0) return;
                   gloo::AllgatherOptions opts(ctx);
                   opts.setTag(tag);
                   opts.setTimeout(timeout);
                   opts.setInput(static_cast<uint8_t*>(in.data_ptr()), in.nbytes());
                   opts.setOutput(static_cast<uint8_t*>(out.data_ptr()), out.nbytes());
                   gloo::allgather(opts);
                 });
}

// Gloo 2022 has no reduce-scatter with the options API: all-reduce a copy and keep this
// rank's slice. Twice the bytes of a real reduce-scatter; the CPU path is for tests and
// small runs, NCCL's is the real one.
WorkPtr GlooCommunicator::ReduceScatter(at::Tensor out, at::Tensor in, ReduceOp op) {
  CheckTensor(out, env_, "reduce_scatter");
  CheckTensor(in, env_, "reduce_scatter");
  TORCH_CHECK(out.scalar_type() == in.scalar_type() && in.numel() == out.numel() * env_.world_size,
              "reduce_scatter: in ", Shape(in), " must be world size ", env_.world_size, " x out ", Shape(out));
  const auto timeout = state_->timeout;
  const int world = env_.world_size, rank = env_.rank;
  return Enqueue(*state_, env_, std::string("reduce_scatter ") + ToString(op) + " " + Shape(in),
                 [out, in, op, timeout, world, rank](const std::shared_ptr<gloo::Context>& ctx, uint32_t tag) mutable {
                   at::Tensor all = in.clone();
                   AllReduceNow(ctx, tag, timeout, all, op, world);
                   out.copy_(all.reshape({-1}).narrow(0, rank * out.numel(), out.numel()).view_as(out));
                 });
}

WorkPtr GlooCommunicator::Barrier() {
  const auto timeout = state_->timeout;
  return Enqueue(*state_, env_, "barrier", [timeout](const std::shared_ptr<gloo::Context>& ctx, uint32_t tag) {
    if (ctx == nullptr) return;
    gloo::BarrierOptions opts(ctx);
    opts.setTag(tag);
    opts.setTimeout(timeout);
    gloo::barrier(opts);
  });
}

}  // namespace ps::comm
