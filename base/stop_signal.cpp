// base/stop_signal.cpp: SIGINT/SIGTERM handling (see stop_signal.h).
#include "base/stop_signal.h"

#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace rz {
namespace {

volatile sig_atomic_t g_signal = 0;
volatile sig_atomic_t g_armed = 0;
std::atomic<int64_t> g_first_ns{0};  // when the first signal came (lock-free: safe in a handler)
pid_t g_launcher = 0;                // ringzero's launcher, whose forwards are the same request
std::atomic<void (*)()> g_cleanups[8];
std::atomic<int> g_ncleanups{0};

int64_t monotonic_ns() {  // clock_gettime is async-signal-safe
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

[[noreturn]] void stop_now(int sig) {
  const int n = g_ncleanups.load();
  for (int i = 0; i < n && i < 8; ++i)
    if (auto fn = g_cleanups[i].load()) fn();
  // The default action, now: unblocked (a handler runs with its signal blocked), so raise
  // ends the process by the signal itself, as the caller's shell and launcher expect.
  signal(sig, SIG_DFL);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, sig);
  sigprocmask(SIG_UNBLOCK, &set, nullptr);
  raise(sig);
  _exit(128 + sig);  // not reached
}

void on_stop(int sig, siginfo_t* info, void*) {
  const int64_t now = monotonic_ns();
  const bool from_launcher =
      info != nullptr && info->si_code == SI_QUEUE && g_launcher > 0 && info->si_pid == g_launcher;
  const int value = from_launcher ? info->si_value.sival_int : 0;
  if (value == kStopNow) stop_now(sig);
  if (g_signal == 0) {
    g_signal = sig;
    g_first_ns.store(now);
    if (g_armed) return;  // the training loop stops at the end of its step
    stop_now(sig);
  }
  if (from_launcher) return;  // passing on the request this rank already has
  if (static_cast<double>(now - g_first_ns.load()) < kRepeatWindowS * 1e9) return;  // the same request again
  stop_now(sig);  // asked twice
}

}  // namespace

void install_stop_handlers() {
  if (const char* l = std::getenv("RINGZERO_LAUNCHED"); l != nullptr && std::strcmp(l, "1") == 0) g_launcher = getppid();
  struct sigaction sa {};
  sa.sa_sigaction = on_stop;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART | SA_SIGINFO;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

bool forward_stop(pid_t pid, int sig, bool now) {
  sigval v{};
  v.sival_int = now ? kStopNow : kStopForwarded;
  return sigqueue(pid, sig, v) == 0;
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
