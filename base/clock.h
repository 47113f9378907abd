// base/clock.h: the one monotonic clock ringzero times things with.
#pragma once

#include <time.h>

#include <chrono>

namespace rz {

using Clock = std::chrono::steady_clock;

// Seconds elapsed since t0 on the monotonic clock.
inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// CPU seconds this process has used, all threads (Python's time.process_time()): unlike wall
// time it does not count the time other processes on a shared machine hold the cores.
inline double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

}  // namespace rz
