// tests/test_process_util.h: process-level helpers the shm tests share: deny a system call
// with seccomp, capture stderr, count a note's occurrences.
#pragma once

#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdio>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>

#include <catch2/catch.hpp>

namespace rz::testing {

// From now on the system call nr fails with errno err in this process, as under a
// container's seccomp profile; false if the kernel refuses the filter.
inline bool deny_syscall(long nr, int err) {
  sock_filter f[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, static_cast<unsigned>(nr), 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (static_cast<unsigned>(err) & SECCOMP_RET_DATA)),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  sock_fprog prog{static_cast<unsigned short>(sizeof f / sizeof f[0]), f};
  return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 && prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == 0;
}

// Runs fn with this process's stderr (and its children's) going to a file; returns it.
inline std::string capture_stderr(const std::function<void()>& fn) {
  char path[] = "/tmp/ringzero-test-stderr-XXXXXX";
  int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  std::fflush(stderr);
  int saved = dup(2);
  dup2(fd, 2);
  close(fd);
  fn();
  std::fflush(stderr);
  dup2(saved, 2);
  close(saved);
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  unlink(path);
  return ss.str();
}

inline size_t occurrences(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

}  // namespace rz::testing
