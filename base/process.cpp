// base/process.cpp: the liveness test behind process.h.
#include "base/process.h"

#include <signal.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace rz {

// A zombie still answers kill(pid, 0), so also look at its state in /proc. A /proc entry
// that exists but cannot be read (a seccomp filter, hidepid) says nothing: alive.
bool process_gone(int pid) {
  if (pid <= 0) return false;
  if (kill(pid, 0) != 0) return errno == ESRCH;
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE* f = std::fopen(path, "r");
  if (f == nullptr) return errno == ENOENT || errno == ESRCH;
  char buf[512] = {0};
  size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  const char* rp = std::strrchr(buf, ')');
  return n > 0 && rp != nullptr && (rp[2] == 'Z' || rp[2] == 'X');
}

}  // namespace rz
