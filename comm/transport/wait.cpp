// comm/transport/wait.cpp: the futex calls and the liveness test behind wait.h.
#include "comm/transport/wait.h"

#include <linux/futex.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace rz {

void futex_wait(std::atomic<uint32_t>* word, uint32_t expected, long timeout_ns) {
  timespec ts{0, timeout_ns};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futex_wake(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, 0x7fffffff, nullptr, nullptr, 0);
}

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
