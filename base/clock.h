// base/clock.h: the one monotonic clock ringzero times things with.
#pragma once

#include <chrono>

namespace rz {

using Clock = std::chrono::steady_clock;

// Seconds elapsed since t0 on the monotonic clock.
inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace rz
