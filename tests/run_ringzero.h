// tests/run_ringzero.h: run the real `ringzero` binary from a test and collect what it says.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <string>

namespace rz::test {

struct BinaryRun {
  int status = -1;     // exit status, or 128 + the signal that ended it
  std::string output;  // stdout and stderr together
};

// Runs `RINGZERO_BINARY ARGS` through the shell under timeout(1) (killed 5 s after
// timeout_s), so a hang fails the test instead of blocking CI. ARGS is shell text.
inline BinaryRun run_ringzero(const std::string& args, int timeout_s = 120) {
  const std::string cmd = "timeout -k 5 " + std::to_string(timeout_s) + " '" + RINGZERO_BINARY + "' " + args + " 2>&1";
  BinaryRun r;
  FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  const int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}

// ARG quoted for the shell (paths may hold spaces).
inline std::string quote(const std::string& arg) { return "'" + arg + "'"; }

// <temp dir>/<prefix><pid>, emptied and created: a test process's scratch directory.
inline std::filesystem::path fresh_temp_dir(const std::string& prefix) {
  const std::filesystem::path d = std::filesystem::temp_directory_path() / (prefix + std::to_string(::getpid()));
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

}  // namespace rz::test
