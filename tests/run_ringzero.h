// tests/run_ringzero.h: run the real `ringzero` binary from a test and collect what it says.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/test_paths.h"

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

// The scratch directories this test process made, removed when it exits (by the process
// that made them, not by a forked child that exits) unless RINGZERO_KEEP_TEST_DIRS is set:
// a model and checkpoints per test program, left behind, filled a CI machine's disk.
struct TempDirs {
  pid_t owner = ::getpid();
  std::vector<std::filesystem::path> dirs;
  ~TempDirs() {
    if (::getpid() != owner || std::getenv("RINGZERO_KEEP_TEST_DIRS") != nullptr) return;
    std::error_code ec;  // best effort: a rank still writing there must not fail the exit
    for (const auto& d : dirs) std::filesystem::remove_all(d, ec);
  }
};

// <temp dir>/<prefix><pid>, emptied and created: a test process's scratch directory.
inline std::filesystem::path fresh_temp_dir(const std::string& prefix) {
  static TempDirs made;
  const std::filesystem::path d = std::filesystem::temp_directory_path() / (prefix + std::to_string(::getpid()));
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  made.dirs.push_back(d);
  return d;
}

// The live (not zombie) child processes of `parent`, read from /proc, in pid order: the
// order a launcher forked its ranks in.
inline std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> out;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream st(e.path() / "stat");
    std::string line;
    std::getline(st, line);
    const size_t rp = line.rfind(')');  // the command name may hold spaces and parentheses
    if (rp == std::string::npos) continue;
    std::istringstream rest(line.substr(rp + 2));
    char state;
    pid_t ppid;
    rest >> state >> ppid;
    if (ppid == parent && state != 'Z') out.push_back(static_cast<pid_t>(std::stoi(name)));
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace rz::test
