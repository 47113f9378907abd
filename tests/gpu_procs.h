// tests/gpu_procs.h: what the multi-process GPU tests share. probe_in_child asks a
// forked child whether a GPU is usable, so the test process (which forks rank processes)
// never initialises CUDA itself; run_with_killed_rank starts two ranks of a ringzero
// command, kills rank 1 after 8 s and reports how rank 0 ended.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "tests/test_paths.h"

namespace rz::test {

// probe() in a forked child: its answer ("" when the GPU is usable, else why not), or a
// reason of its own when the child died.
inline std::string probe_in_child(std::string (*probe)()) {
  int fds[2];
  if (pipe(fds) != 0) return "pipe() failed";
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    const std::string why = probe();
    const ssize_t w = write(fds[1], why.data(), why.size());
    (void)w;
    _exit(0);
  }
  close(fds[1]);
  std::string why;
  char buf[512];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0) why.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int st = 0;
  waitpid(pid, &st, 0);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) return "the CUDA probe process failed";
  return why;
}

struct KilledRun {
  std::string out;     // both ranks' output, then "rank0-exit=<status>"
  double seconds = 0;  // from the start to rank 0's exit
};

// `ringzero ARGS` as ranks 0 and 1 of a 2-rank job on 127.0.0.1:port (the launcher's
// environment); rank 1 gets SIGKILL after 8 s; everything under a 90 s timeout.
inline KilledRun run_with_killed_rank(const std::string& args, int port) {
  const std::string bin = std::string("'") + RINGZERO_BINARY + "' ";
  const std::string env = "RINGZERO_LAUNCHED=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port) +
                          " WORLD_SIZE=2 RINGZERO_JOB_TOKEN=killtest ";
  const std::string cmd = "bash -c \"" + env + "RANK=0 LOCAL_RANK=0 " + bin + args + " & p0=\\$!; " + env +
                          "RANK=1 LOCAL_RANK=1 " + bin + args + " & p1=\\$!; sleep 8; kill -9 \\$p1; wait \\$p0; "
                          "echo rank0-exit=\\$?\" 2>&1";
  KilledRun run;
  const auto t0 = std::chrono::steady_clock::now();
  FILE* p = popen(("timeout -k 5 90 " + cmd).c_str(), "r");
  if (p == nullptr) return run;
  char buf[4096];
  size_t got;
  while ((got = fread(buf, 1, sizeof buf, p)) > 0) run.out.append(buf, got);
  pclose(p);
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return run;
}

}  // namespace rz::test
