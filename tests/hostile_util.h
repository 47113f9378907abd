// tests/hostile_util.h: what the hostile-use tests (test_train_hostile*.cpp) share: running
// the real binary with an environment, a prepared data set, a tiny training command line,
// and watching spawned process trees.
// Every command runs under `timeout`, so a hang fails the test instead of blocking CI.
#pragma once

#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "launch/launch.h"
#include "tests/run_ringzero.h"

namespace rz::test::hostile {

namespace fs = std::filesystem;

struct Result {
  int status = -1;
  std::string output;  // stdout and stderr together
};

inline Result run(const std::string& args, int timeout_s = 120, const std::string& env = "") {
  const std::string cmd = env + " timeout -k 5 " + std::to_string(timeout_s) + " " + quote(RINGZERO_BINARY) + " " + args + " 2>&1";
  Result r;
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.output.append(buf, n);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}

inline fs::path work_dir() {
  static const fs::path dir = fresh_temp_dir("rz_test_train_hostile_");
  return dir;
}

inline fs::path write_text(const std::string& name, int files, int lines) {
  const fs::path text = work_dir() / name;
  fs::create_directories(text);
  uint64_t x = 12345;
  for (int f = 0; f < files; ++f) {
    std::ofstream out(text / ("doc" + std::to_string(f) + ".txt"));
    for (int s = 0; s < lines; ++s) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      out << "the rank " << (x >> 60) << " sends chunk " << ((x >> 40) & 15) << ".\n";
    }
  }
  return text;
}

inline fs::path data_dir() {
  static fs::path dir = [] {
    const fs::path out = work_dir() / "data";
    Result r = run("prepare --input " + quote(write_text("text", 20, 60).string()) +
                   " --tokenizer byte --val-fraction 0.1 --out " + quote(out.string()));
    INFO(r.output);
    REQUIRE(r.status == 0);
    return out;
  }();
  return dir;
}

inline std::string tiny_args(const std::string& extra) {
  const fs::path d = data_dir();
  return "train --model tiny --data " + quote((d / "train_*.bin").string()) +
         " --batch 4 --seq 32 --lr 3e-3 --warmup 2 --bucket-mb 0.05 --threads 1 " + extra;
}

inline std::string last_line(const std::string& s) {
  std::string t = s;
  while (!t.empty() && t.back() == '\n') t.pop_back();
  const size_t nl = t.rfind('\n');
  return nl == std::string::npos ? t : t.substr(nl + 1);
}

inline std::vector<std::string> complete_steps(const fs::path& ck) {
  std::vector<std::string> out;
  if (fs::is_directory(ck))
    for (const auto& e : fs::directory_iterator(ck))
      if (fs::exists(e.path() / "COMPLETE")) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

inline std::vector<int> metric_steps(const fs::path& p) {
  std::vector<int> out;
  std::ifstream in(p);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) out.push_back(nlohmann::json::parse(line)["step"].get<int>());
  return out;
}

// Starts `cmd` under sh in the background, its output to log; returns the shell's pid.
inline pid_t spawn(const std::string& args, const fs::path& log) {
  const std::string cmd = "exec timeout -k 5 120 " + quote(RINGZERO_BINARY) + " " + args + " > " + quote(log.string()) + " 2>&1";
  pid_t sh = fork();
  if (sh == 0) {
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return sh;
}

using rz::test::children_of;

// Running (a zombie waiting for a reaper counts as gone).
inline bool alive(pid_t p) {
  std::ifstream st("/proc/" + std::to_string(p) + "/stat");
  std::string line;
  if (!std::getline(st, line)) return false;
  const size_t rp = line.rfind(')');
  return rp != std::string::npos && rp + 2 < line.size() && line[rp + 2] != 'Z';
}

inline std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline bool wait_for(const std::function<bool()>& cond, double seconds) {
  const auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < seconds) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return cond();
}

// One job on several local "nodes": a launcher per node on this host, all with the same
// --master-addr 127.0.0.1 and --master-port (a free one) and the same job token; args[i] is
// node i's command line, which names its own --nnodes and --node-rank. Each runs under
// timeout(1) with its output in its own log; the nodes start together and are all waited for.
struct NodeRun {
  int status = -1;
  std::string output;
  double seconds = 0;  // from the start of all nodes to this node's exit
};
inline std::vector<NodeRun> run_nodes(const std::vector<std::string>& args, int timeout_s = 120) {
  const std::string port = std::to_string(rz::pick_free_port());
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<pid_t> pids;
  std::vector<fs::path> logs;
  for (size_t i = 0; i < args.size(); ++i) {
    logs.push_back(work_dir() / ("node" + std::to_string(i) + "_" + port + ".log"));
    const std::string cmd = "exec env RINGZERO_JOB_TOKEN=0123456789abcdef0123456789abcdef timeout -k 5 " +
                            std::to_string(timeout_s) + " " + quote(RINGZERO_BINARY) + " " + args[i] +
                            " --master-addr 127.0.0.1 --master-port " + port + " > " + quote(logs.back().string()) +
                            " 2>&1";
    const pid_t pid = fork();
    if (pid == 0) {
      execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    pids.push_back(pid);
  }
  std::vector<NodeRun> out(args.size());
  for (size_t left = args.size(); left > 0; --left) {
    int st = 0;
    const pid_t p = waitpid(-1, &st, 0);
    const auto it = std::find(pids.begin(), pids.end(), p);
    if (it == pids.end()) continue;
    NodeRun& r = out[static_cast<size_t>(it - pids.begin())];
    r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  for (size_t i = 0; i < args.size(); ++i) out[i].output = slurp(logs[i]);
  return out;
}

}  // namespace rz::test::hostile
