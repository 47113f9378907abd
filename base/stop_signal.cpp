// base/stop_signal.cpp: SIGINT/SIGTERM handling (see stop_signal.h).
#include "base/stop_signal.h"

#include <signal.h>

#include <atomic>
#include <cstdio>
#include <cstring>

namespace rz {
namespace {

volatile sig_atomic_t g_signal = 0;
volatile sig_atomic_t g_count = 0;
volatile sig_atomic_t g_armed = 0;
std::atomic<void (*)()> g_cleanups[8];
std::atomic<int> g_ncleanups{0};

void on_stop(int sig) {
  if (g_signal == 0) g_signal = sig;
  g_count = g_count + 1;
  if (g_armed && g_count == 1) return;  // the training loop stops at the end of its step
  const int n = g_ncleanups.load();
  for (int i = 0; i < n && i < 8; ++i)
    if (auto fn = g_cleanups[i].load()) fn();
  signal(sig, SIG_DFL);
  raise(sig);
}

}  // namespace

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

void arm_graceful_stop(bool armed) { g_armed = armed ? 1 : 0; }

int stop_signal_received() { return g_signal; }

void register_stop_cleanup(void (*fn)()) {
  const int i = g_ncleanups.load();
  if (i >= 8) return;
  g_cleanups[i].store(fn);
  g_ncleanups.store(i + 1);
}

std::string signal_name(int sig) {
  const char* abbrev = sig > 0 ? sigabbrev_np(sig) : nullptr;
  return abbrev != nullptr ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

namespace {
constexpr const char* kNoticeFormat = "ringzero: rank %d received %s (signal %d); every rank stops after this step";
}  // namespace

std::string stop_notice(int rank, int sig) {
  char buf[160];
  std::snprintf(buf, sizeof(buf), kNoticeFormat, rank, signal_name(sig).c_str(), sig);
  return buf;
}

bool parse_stop_notice(const std::string& line, int* rank, int* sig) {
  int r = -1, s = -1, used = 0;
  char name[32];
  if (std::sscanf(line.c_str(), "ringzero: rank %d received %31s (signal %d); every rank stops after this step%n", &r,
                  name, &s, &used) != 3 ||
      used != static_cast<int>(line.size()) || r < 0 || s <= 0 || line != stop_notice(r, s))
    return false;
  *rank = r;
  *sig = s;
  return true;
}

}  // namespace rz
