// Gloo communicator on 2 and 4 local processes (fork), 127.0.0.1: every collective
// against a reference computed locally; a rank that exits makes the others fail with an
// error naming it; a rank that stops answering fails the others within timeout_s.
#include "comm/communicator.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include "tests/catch.h"
#include "tests/temp_dir.h"

namespace {

using ps::comm::Communicator;
using ps::comm::ReduceOp;

int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Forks `world` ranks; each builds a Gloo communicator and runs `body`, which returns
// the text to record (rank<r>.txt). A rank exits 0 unless body throws (text: the error,
// exit 1). Returns the exit codes; `texts` gets each rank's text.
std::vector<int> RunRanks(int world, const std::function<std::string(Communicator&)>& body,
                          std::vector<std::string>* texts, int64_t timeout_s = 60) {
  const int port = FreePort();
  const std::string dir = ps::testing::TempDir();
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      std::string text;
      int code = 0;
      try {
        ps::comm::RankEnv env;
        env.rank = r;
        env.world_size = world;
        env.local_rank = r;
        env.master_addr = "127.0.0.1";
        env.master_port = port;
        env.source = ps::comm::Launcher::kTorchrun;
        ps::comm::DistributedConfig config;
        config.init_timeout_s = 30;
        config.timeout_s = timeout_s;
        auto comm = ps::comm::CreateCommunicator(env, config, c10::DeviceType::CPU);
        text = body(*comm);
      } catch (const c10::Error& e) {
        text = e.what_without_backtrace();
        code = 1;
      } catch (const std::exception& e) {
        text = e.what();
        code = 1;
      }
      std::ofstream(dir + "/rank" + std::to_string(r) + ".txt") << text;
      std::fflush(nullptr);
      _exit(code);
    }
    pids.push_back(pid);
  }
  std::vector<int> codes;
  for (int r = 0; r < world; ++r) {
    int status = 0;
    waitpid(pids[r], &status, 0);
    codes.push_back(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
  }
  texts->clear();
  for (int r = 0; r < world; ++r) {
    const std::string path = dir + "/rank" + std::to_string(r) + ".txt";
    texts->push_back(ReadFile(path));
    std::remove(path.c_str());  // a rank killed by a signal must not show an earlier call's text
  }
  return codes;
}

// Rank r's input of n elements: distinct per rank and element.
at::Tensor Input(int rank, int64_t n) { return at::arange(n, at::kFloat) * (rank + 1) + 0.5 * rank; }

// Every collective on this rank against a reference built from all ranks' inputs.
std::string CheckCollectives(Communicator& comm) {
  const int p = comm.world_size(), r = comm.rank();
  const int64_t n = 1000;
  at::Tensor sum_ref = at::zeros({n}), max_ref = Input(0, n);
  for (int q = 0; q < p; ++q) {
    sum_ref += Input(q, n);
    max_ref = at::maximum(max_ref, Input(q, n));
  }
  std::string failures;
  auto expect = [&](const char* what, const at::Tensor& got, const at::Tensor& want) {
    if (!at::allclose(got, want, 1e-6, 1e-5)) failures += std::string(what) + " differs; ";
  };
  at::Tensor t = Input(r, n);
  comm.AllReduce(t, ReduceOp::kSum)->Wait();
  expect("all_reduce sum", t, sum_ref);
  t = Input(r, n);
  comm.AllReduce(t, ReduceOp::kAvg)->Wait();
  expect("all_reduce avg", t, sum_ref / p);
  t = Input(r, n);
  comm.AllReduce(t, ReduceOp::kMax)->Wait();
  expect("all_reduce max", t, max_ref);
  at::Tensor l = at::full({3}, static_cast<int64_t>(r + 1), at::kLong);
  comm.AllReduce(l, ReduceOp::kSum)->Wait();
  if (l[0].item<int64_t>() != p * (p + 1) / 2) failures += "all_reduce int64 differs; ";

  t = Input(r, n);
  comm.Broadcast(t, p - 1)->Wait();
  expect("broadcast", t, Input(p - 1, n));

  at::Tensor gathered = at::empty({p * n});
  comm.AllGather(gathered, Input(r, n))->Wait();
  std::vector<at::Tensor> parts;
  for (int q = 0; q < p; ++q) parts.push_back(Input(q, n));
  expect("all_gather", gathered, at::cat(parts));

  // in [p * n]: rank q's = Input(q, p * n); rank r's out = sum over q of its slice r.
  at::Tensor scattered = at::empty({n});
  comm.ReduceScatter(scattered, Input(r, p * n), ReduceOp::kAvg)->Wait();
  at::Tensor rs_ref = at::zeros({n});
  for (int q = 0; q < p; ++q) rs_ref += Input(q, p * n).narrow(0, r * n, n);
  expect("reduce_scatter avg", scattered, rs_ref / p);

  // Several calls in flight, waited in order.
  std::vector<at::Tensor> ts;
  std::vector<ps::comm::WorkPtr> works;
  for (int i = 0; i < 4; ++i) {
    ts.push_back(Input(r, n) * i);
    works.push_back(comm.AllReduce(ts.back(), ReduceOp::kSum));
  }
  for (int i = 0; i < 4; ++i) {
    works[i]->Wait();
    expect("async all_reduce", ts[i], sum_ref * i);
  }
  comm.Barrier()->Wait();
  return failures.empty() ? "ok" : failures;
}

}  // namespace

TEST_CASE("Gloo collectives on 2 and 4 processes match the reference") {
  for (int world : {2, 4}) {
    INFO("world size " << world);
    std::vector<std::string> texts;
    const auto codes = RunRanks(world, CheckCollectives, &texts);
    for (int r = 0; r < world; ++r) {
      INFO("rank " << r << ": " << texts[r]);
      CHECK(codes[r] == 0);
      CHECK(texts[r] == "ok");
    }
  }
}

TEST_CASE("world size 1 needs no store: collectives are local") {
  ps::comm::RankEnv env;
  auto comm = ps::comm::CreateCommunicator(env, {}, c10::DeviceType::CPU);
  at::Tensor t = Input(0, 10);
  comm->AllReduce(t, ReduceOp::kAvg)->Wait();
  CHECK(at::equal(t, Input(0, 10)));
  at::Tensor out = at::empty({10});
  comm->AllGather(out, Input(0, 10))->Wait();
  CHECK(at::equal(out, Input(0, 10)));
  comm->ReduceScatter(out, Input(0, 10) * 2, ReduceOp::kSum)->Wait();
  CHECK(at::equal(out, Input(0, 10) * 2));
  comm->Barrier()->Wait();
}

TEST_CASE("a rank that exits makes the others fail with an error naming it") {
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::string> texts;
  const auto codes = RunRanks(3, [](Communicator& comm) -> std::string {
    at::Tensor t = at::ones({100});
    comm.AllReduce(t, ReduceOp::kSum)->Wait();  // everyone is connected
    if (comm.rank() == 2) _exit(7);              // dies without a word
    comm.AllReduce(t, ReduceOp::kSum)->Wait();
    return "no error";
  }, &texts, /*timeout_s=*/20);
  CHECK(codes[2] == 7);
  for (int r : {0, 1}) {
    INFO("rank " << r << ": " << texts[r]);
    CHECK(codes[r] == 1);
    CHECK_THAT(texts[r], Catch::Contains("rank " + std::to_string(r) + "/3: all_reduce sum Float[100] (call 2) failed"));
    CHECK_THAT(texts[r], Catch::Contains("rank 2 stopped answering"));
  }
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(20));
}

TEST_CASE("a rank that stops answering fails the others within timeout_s") {
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::string> texts;
  const auto codes = RunRanks(2, [](Communicator& comm) -> std::string {
    at::Tensor t = at::ones({100});
    if (comm.rank() == 1) {
      std::this_thread::sleep_for(std::chrono::seconds(8));  // hangs past the timeout
      return "slept";
    }
    comm.AllReduce(t, ReduceOp::kSum)->Wait();
    return "no error";
  }, &texts, /*timeout_s=*/2);
  INFO("rank 0: " << texts[0]);
  CHECK(codes[0] == 1);
  CHECK_THAT(texts[0], Catch::Contains("rank 0/2: all_reduce sum Float[100] (call 1) failed"));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(15));
}
