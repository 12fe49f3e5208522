#include "comm/store.h"

#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

namespace ps::comm {

c10::intrusive_ptr<c10d::Store> ConnectStore(const RankEnv& env, std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(env.master_port);
  options.isServer = env.rank == 0;
  options.numWorkers = static_cast<std::size_t>(env.world_size);
  options.waitWorkers = true;
  options.timeout = timeout;
  const std::string where = env.master_addr + ":" + std::to_string(env.master_port);
  try {
    return c10::make_intrusive<c10d::TCPStore>(env.master_addr, options);
  } catch (const std::exception& e) {
    const std::string what = [&] {
      if (auto* c = dynamic_cast<const c10::Error*>(&e)) return c->what_without_backtrace();
      return e.what();
    }();
    TORCH_CHECK(false, "rank ", env.rank, "/", env.world_size,
                env.rank == 0 ? ": could not serve the rendezvous store at " : ": could not reach the rendezvous store at ",
                where, " (rank 0's MASTER_ADDR:MASTER_PORT) within ", timeout.count() / 1000,
                " s (distributed.init_timeout_s): ", what);
  }
}

}  // namespace ps::comm
