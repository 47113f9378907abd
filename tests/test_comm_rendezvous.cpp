// Real jobs (the ringzero binary, ranks as processes) beside a hostile neighbour: a
// stranger's idle connections fill rank 0's store port and the job still starts; and every
// socket a loopback job listens on (the launcher's free-port probe, rank 0's store, the
// tcp transport's listeners) is bound to 127.0.0.1, never to every interface. Listening
// sockets are seen through an LD_PRELOAD library (tests/listen_log_preload.cpp).
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "comm/rendezvous/job_auth.h"
#include "launch/launch.h"
#include "comm/rendezvous/socket.h"
#include "tests/run_ringzero.h"

using namespace rz;
using rz::test::quote;

namespace {

pid_t start_shell(const std::string& cmd) {
  pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

int exit_status(pid_t pid) {
  int st = 0;
  if (waitpid(pid, &st, 0) != pid) return -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

const std::string kBench =
    " comm-bench --transport tcp --op all_reduce --min-bytes 1K --max-bytes 4K --iters 2 --warmup 1";

}  // namespace

TEST_CASE("a real two-rank job rendezvouses while 300 idle connections hold rank 0's port") {
  // Rank 0 starts first; the stranger fills its store's port with idle connections; then
  // rank 1 starts, and the job must finish.
  const int port = pick_free_port();
  const std::string env = "env RINGZERO_LAUNCHED=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" +
                          std::to_string(port) + " RINGZERO_JOB_TOKEN=" + random_job_token() + " RANK=";
  const std::string log = rz::test::fresh_temp_dir("rz_test_rdv_").string();
  auto rank = [&](int r) {
    return start_shell("exec timeout -k 5 120 " + env + std::to_string(r) + " " + quote(RINGZERO_BINARY) + kBench +
                       " --nproc 2 --comm-timeout 60 > " + quote(log + "/rank" + std::to_string(r)) + " 2>&1");
  };
  const pid_t r0 = rank(0);
  std::vector<Socket> idle;
  idle.push_back(Socket::connect_to("127.0.0.1", port, now_s() + 60, "test: rank 0's store"));
  for (int i = 1; i < 300; ++i) idle.push_back(Socket::connect_to("127.0.0.1", port, now_s() + 5, "test"));
  const pid_t r1 = rank(1);
  const int st1 = exit_status(r1), st0 = exit_status(r0);
  std::ifstream f0(log + "/rank0"), f1(log + "/rank1");
  std::stringstream out;
  out << f0.rdbuf() << "\n---- rank 1\n" << f1.rdbuf();
  INFO(out.str());
  CHECK(st0 == 0);
  CHECK(st1 == 0);
  CHECK(out.str().find("refused connection from 127.0.0.1") != std::string::npos);  // rank 0 said what it saw
}

TEST_CASE("a loopback job listens on 127.0.0.1 only: launcher, store and tcp transport") {
  const std::string dir = rz::test::fresh_temp_dir("rz_test_listen_").string();
  const std::string log = dir + "/listens", out = dir + "/out";
  // A sanitizer build's runtime wants to come first; the preloaded library comes first here.
  const char* asan_env = std::getenv("ASAN_OPTIONS");
  const std::string asan = std::string(asan_env != nullptr ? asan_env : "") + ":verify_asan_link_order=0";
  const int st = exit_status(start_shell("exec timeout -k 5 120 env LD_PRELOAD=" + quote(RZ_LISTEN_LOG_LIBRARY) +
                                         " RZ_LISTEN_LOG=" + quote(log) + " ASAN_OPTIONS=" + quote(asan) + " " +
                                         quote(RINGZERO_BINARY) + kBench + " --nproc 3 > " + quote(out) + " 2>&1"));
  std::ifstream o(out);
  std::stringstream said;
  said << o.rdbuf();
  INFO(said.str());
  REQUIRE(st == 0);
  std::ifstream f(log);
  std::vector<std::string> addrs;
  std::set<std::string> pids;
  for (std::string pid, addr; f >> pid >> addr;) {
    addrs.push_back(addr);
    pids.insert(pid);
  }
  INFO("listened on: " << [&] {
    std::string all;
    for (const auto& a : addrs) all += a + " ";
    return all;
  }());
  // The launcher's probe, the store, and one tcp listener per rank, in four processes.
  CHECK(addrs.size() >= 5);
  CHECK(pids.size() == 4);
  for (const std::string& a : addrs) CHECK(a.rfind("127.0.0.1:", 0) == 0);
}
