#include "trainer/stop_signals.h"

#include <signal.h>
#include <unistd.h>

namespace ps::trainer {
namespace {

constexpr int kSignals[] = {SIGTERM, SIGINT, SIGUSR1};
std::atomic<int> g_requested{0};  // see the header: a handler cannot be given an object
struct sigaction g_previous[3];

void OnSignal(int signo) {
  int none = 0;
  if (!g_requested.compare_exchange_strong(none, signo)) _exit(128 + signo);  // the second one: at once
}

}  // namespace

StopSignals::StopSignals() {
  g_requested = 0;
  struct sigaction action = {};
  action.sa_handler = OnSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  for (int i = 0; i < 3; ++i) sigaction(kSignals[i], &action, &g_previous[i]);
}

StopSignals::~StopSignals() {
  for (int i = 0; i < 3; ++i) sigaction(kSignals[i], &g_previous[i], nullptr);
}

const std::atomic<int>& StopSignals::requested() const { return g_requested; }

}  // namespace ps::trainer
