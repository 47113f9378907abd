// base/checked.cpp: see checked.h.
#include "base/checked.h"

#include <unistd.h>

#include <algorithm>

namespace rz {

int online_cores() { return static_cast<int>(std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN))); }

int max_threads() { return kThreadsPerCore * online_cores(); }

void check_thread_count(long long n, const char* what) {
  RZ_CHECK(n >= 1 && n <= max_threads(), "%s: %lld threads; expected 1 to %d (%d x the %d cores of this machine)",
           what, n, max_threads(), kThreadsPerCore, online_cores());
}

}  // namespace rz
