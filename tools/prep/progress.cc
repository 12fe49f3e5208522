#include "tools/prep/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace ps::prep {

std::string HumanBytes(double bytes) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  int u = 0;
  while (bytes >= 1000 && u < 4) { bytes /= 1000; ++u; }
  char buf[32];
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.1f %s", bytes, units[u]);
  return buf;
}

std::string HumanCount(double n) {
  char buf[32];
  if (n >= 1e9) std::snprintf(buf, sizeof(buf), "%.2fG", n / 1e9);
  else if (n >= 1e6) std::snprintf(buf, sizeof(buf), "%.2fM", n / 1e6);
  else if (n >= 1e3) std::snprintf(buf, sizeof(buf), "%.1fk", n / 1e3);
  else std::snprintf(buf, sizeof(buf), "%.0f", n);
  return buf;
}

Progress::Progress(int64_t total_bytes)
    : total_bytes_(total_bytes), tty_(::isatty(STDERR_FILENO) == 1), start_(Clock::now()), last_(start_) {}

void Progress::Update(int64_t bytes, int64_t tokens) {
  const auto now = Clock::now();
  if (now - last_ < (tty_ ? std::chrono::milliseconds(200) : std::chrono::seconds(10))) return;
  last_ = now;
  Print(bytes, tokens);
}

void Progress::Done(int64_t bytes, int64_t tokens) {
  if (tty_) {
    Print(bytes, tokens);
    std::fprintf(stderr, "\n");
  }
}

double Progress::elapsed_s() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

void Progress::Print(int64_t bytes, int64_t tokens) const {
  const double t = std::max(elapsed_s(), 1e-9);
  const double frac = total_bytes_ > 0 ? std::min(1.0, double(bytes) / total_bytes_) : 1.0;
  const double eta_s = frac > 0 ? t * (1 - frac) / frac : 0;
  char eta[32];
  std::snprintf(eta, sizeof(eta), "%d:%02d", int(eta_s) / 60, int(eta_s) % 60);
  const std::string rate = HumanCount(tokens / t) + " tokens/s, " + HumanBytes(bytes / t) + "/s";
  if (tty_) {
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(frac * kWidth);
    std::string bar(filled, '=');
    if (filled < kWidth) bar += '>' + std::string(kWidth - filled - 1, ' ');
    std::fprintf(stderr, "\r[%s] %5.1f%%  %s tokens  %s  ETA %s  ", bar.c_str(), 100 * frac,
                 HumanCount(tokens).c_str(), rate.c_str(), eta);
  } else {
    std::fprintf(stderr, "ps_prep: %.1f%% of input, %s tokens, %s, ETA %s\n", 100 * frac,
                 HumanCount(tokens).c_str(), rate.c_str(), eta);
  }
  std::fflush(stderr);
}

}  // namespace ps::prep
