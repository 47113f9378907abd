// comm/transport/core_spread.cpp: see core_spread.h.
#include "comm/transport/core_spread.h"

#include <sched.h>

#include <chrono>
#include <cstdio>

#include "comm/options.h"

namespace rz {
namespace {

double steady_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

CoreSpread::CoreSpread() : CoreSpread(Hooks{}) {}

CoreSpread::CoreSpread(Hooks hooks) : hooks_(std::move(hooks)) {
  if (!hooks_.core_free) hooks_.core_free = core_free_now;
  if (!hooks_.move_off) hooks_.move_off = move_off_cpu;
  if (!hooks_.now_s) hooks_.now_s = steady_s;
}

void CoreSpread::on_idle(int cpu, int right_cpu) {
  if (cpu < 0 || right_cpu != cpu) {
    streak_ = 0;
    return;
  }
  if (++streak_ < kStreak) return;
  streak_ = 0;
  const double now = hooks_.now_s();
  if (now < next_try_s_) return;
  next_try_s_ = now + kRetryS;
  if (hooks_.core_free() && hooks_.move_off(cpu)) moves_++;
}

bool core_spread_allowed() { return env_switch("RINGZERO_CORE_SPREAD", true); }

bool core_free_now() {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return false;
  // "0.12 0.08 0.01 2/345 6789": the fourth field is runnable/total.
  FILE* f = std::fopen("/proc/loadavg", "r");
  if (f == nullptr) return false;
  double a, b, c;
  int running = 0, total = 0;
  const int got = std::fscanf(f, "%lf %lf %lf %d/%d", &a, &b, &c, &running, &total);
  std::fclose(f);
  return got == 5 && running >= 1 && running <= CPU_COUNT(&allowed);
}

bool move_off_cpu(int cpu) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (cpu < 0 || cpu >= CPU_SETSIZE || sched_getaffinity(0, sizeof allowed, &allowed) != 0) return false;
  if (!CPU_ISSET(cpu, &allowed) || CPU_COUNT(&allowed) < 2) return false;
  cpu_set_t others = allowed;
  CPU_CLR(cpu, &others);
  if (sched_setaffinity(0, sizeof others, &others) != 0) return false;  // migrates before it returns
  // Back to every core it may use; should this fail, it stays on the others (still correct).
  (void)sched_setaffinity(0, sizeof allowed, &allowed);
  return true;
}

}  // namespace rz
