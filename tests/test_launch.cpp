// Tests of launch/: the launcher sets the rank variables, and one failing rank stops
// the others promptly with that rank's status. The children are small shell scripts.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>

#include <signal.h>
#include <unistd.h>

#include "base/clock.h"
#include "launch/launch.h"

using namespace rz;

static std::vector<std::string> sh(const std::string& script) { return {"/bin/sh", "-c", script}; }

TEST_CASE("every rank sees torchrun's variables and the job token") {
  char dir[] = "/tmp/rz_launch_XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  std::string out = std::string(dir) + "/env";
  LaunchOptions opts;
  opts.nproc_per_node = 3;
  int status = launch_local_ranks(
      sh("echo \"$RANK $WORLD_SIZE $LOCAL_RANK $MASTER_ADDR ${#RINGZERO_JOB_TOKEN} $RINGZERO_LAUNCHED\" > " +
         out + ".$RANK; test -n \"$MASTER_PORT\""),
      opts);
  REQUIRE(status == 0);
  for (int r = 0; r < 3; ++r) {
    std::ifstream f(out + "." + std::to_string(r));
    std::string rank, world, local, addr, token_len, launched;
    f >> rank >> world >> local >> addr >> token_len >> launched;
    CHECK(rank == std::to_string(r));
    CHECK(world == "3");
    CHECK(local == std::to_string(r));
    CHECK(addr == "127.0.0.1");
    CHECK(token_len == "32");
    CHECK(launched == "1");
  }
}

TEST_CASE("a failing rank stops the others and its status is returned") {
  LaunchOptions opts;
  opts.nproc_per_node = 3;
  opts.stop_grace_s = 2.0;
  auto t0 = Clock::now();
  // Rank 1 fails at once; the others would sleep for a minute.
  int status = launch_local_ranks(
      sh("if [ \"$RANK\" = 1 ]; then echo 'rank one is broken' >&2; exit 3; fi; exec sleep 60"), opts);
  double seconds = seconds_since(t0);
  REQUIRE(status == 3);
  REQUIRE(seconds < 10.0);
}

// A shell fragment that waits (30 s at most) until `path` exists: a rank that is to fail
// first waits for the rank it speaks of, since the launcher starts no rank after a failure.
static std::string wait_for_file(const std::string& path) {
  return "i=0; while [ ! -e " + path + " ] && [ $i -lt 3000 ]; do sleep 0.01; i=$((i+1)); done; ";
}

TEST_CASE("the launcher reports the earliest failure, not a knock-on one (issue 11)") {
  LaunchOptions opts;
  opts.nproc_per_node = 3;
  opts.stop_grace_s = 2.0;
  // Rank 2 fails first; ranks 0 and 1 fail a moment later because their peer went away.
  // They wait until rank 2 has failed (the launcher starts no rank after a failure, and
  // on a loaded machine rank 0 could otherwise fail before rank 2 is forked).
  char dir[] = "/tmp/rz_launch_XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  const std::string failed = std::string(dir) + "/rank2_failed";
  int status = launch_local_ranks(
      sh("if [ \"$RANK\" = 2 ]; then echo 'disk full' >&2; touch " + failed + "; exit 7; fi; "
         + wait_for_file(failed) + "sleep 0.01; "
         "echo 'rank 2 closed the connection' >&2; exit 1"),
      opts);
  CHECK(status == 7);
}

TEST_CASE("a knock-on failure first leaves the failing rank time to say why") {
  LaunchOptions opts;
  opts.nproc_per_node = 2;
  opts.stop_grace_s = 3.0;
  // Rank 1 sees its peer go away at once; rank 0, still unwinding, names the cause a moment
  // later. SIGTERM at rank 1's exit would have killed rank 0 before it said anything.
  int status = launch_local_ranks(
      sh("if [ \"$RANK\" = 1 ]; then echo 'rendezvous: the store closed the connection' >&2; exit 1; fi; "
         "sleep 1; echo '/dev/shm is full' >&2; exit 5"),
      opts);
  CHECK(status == 5);
}

TEST_CASE("ranks get a job nonce and their own process group") {
  char dir[] = "/tmp/rz_launch_XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  const std::string out = std::string(dir) + "/n";
  LaunchOptions opts;
  opts.nproc_per_node = 2;
  REQUIRE(launch_local_ranks(sh("echo \"$RINGZERO_JOB_NONCE $(ps -o pgid= -p $$) $$\" > " + out + ".$RANK"), opts) == 0);
  std::string n0, n1, pg, pid;
  std::ifstream(out + ".0") >> n0 >> pg >> pid;
  std::ifstream(out + ".1") >> n1;
  CHECK(n0.size() == 32);
  CHECK(n0 == n1);
  CHECK(n0 != std::string(std::getenv("RINGZERO_JOB_TOKEN") ? std::getenv("RINGZERO_JOB_TOKEN") : ""));
  CHECK(pg == pid);  // a Ctrl-C in the terminal reaches the launcher only
}

TEST_CASE("a rank that ignores SIGTERM is killed after the grace period") {
  LaunchOptions opts;
  opts.nproc_per_node = 2;
  opts.stop_grace_s = 1.0;
  auto t0 = Clock::now();
  int status = launch_local_ranks(
      sh("if [ \"$RANK\" = 0 ]; then sleep 0.2; kill -9 $$; fi; trap '' TERM; while :; do sleep 0.1; done"), opts);
  double seconds = seconds_since(t0);
  REQUIRE(status == 128 + 9);
  REQUIRE(seconds < 10.0);
}

TEST_CASE("bad launcher options are one-line errors") {
  LaunchOptions opts;
  opts.nproc_per_node = 0;
  REQUIRE_THROWS_WITH(launch_local_ranks(sh("true"), opts), Catch::Contains("--nproc-per-node"));
  opts.nproc_per_node = 2;
  opts.nnodes = 2;
  opts.node_rank = 0;
  opts.master_port = 0;
  REQUIRE_THROWS_WITH(launch_local_ranks(sh("true"), opts), Catch::Contains("--master-port"));
}

// Runs the launcher with its stderr in a file; returns (status, what it printed).
static std::pair<int, std::string> launch_capturing(const std::vector<std::string>& argv, const LaunchOptions& opts) {
  char path[] = "/tmp/rz_launch_err_XXXXXX";
  const int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  std::fflush(stderr);
  const int saved = dup(STDERR_FILENO);
  dup2(fd, STDERR_FILENO);
  const int status = launch_local_ranks(argv, opts);
  std::fflush(stderr);
  dup2(saved, STDERR_FILENO);
  close(saved);
  close(fd);
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::remove(path);
  return {status, text};
}

TEST_CASE("a signal to one rank is reported as that rank's, not as the others' stop (issue 26)") {
  LaunchOptions opts;
  opts.nproc_per_node = 2;
  opts.stop_grace_s = 3.0;
  char dir[] = "/tmp/rz_launch_XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  const std::string marker = std::string(dir) + "/rank1_finished";
  // Rank 0 acts only once rank 1 runs: the launcher starts no rank after one has failed,
  // and on a loaded machine rank 0 could end before rank 1 is forked.
  const std::string started = std::string(dir) + "/rank1_started";
  const std::string wait_for_rank1 = wait_for_file(started);
  SECTION("a rank that received SIGINT stops after its step; the other stops with it, unhurried") {
    // Rank 0 says (as a training rank does) that SIGINT reached it; rank 1 needs a moment
    // longer to finish the agreed stop: the launcher must not SIGTERM it meanwhile.
    auto [status, err] = launch_capturing(
        sh("if [ \"$RANK\" = 0 ]; then " + wait_for_rank1 +
           "echo 'ringzero: rank 0 received SIGINT (signal 2); every rank stops after "
           "this step' >&2; exit 130; fi; touch " + started + "; sleep 1; touch " + marker + "; exit 130"),
        opts);
    INFO(err);
    CHECK(status == 130);
    CHECK(std::ifstream(marker).good());
    CHECK(err.find("ringzero: rank 0 received SIGINT; every rank finished its step and stopped") != std::string::npos);
    CHECK(err.find("killed") == std::string::npos);
    CHECK(err.find("rank 1 exited") == std::string::npos);
  }
  SECTION("a rank killed by SIGINT is named with the signal; the launcher stopped the others") {
    auto [status, err] = launch_capturing(
        sh("if [ \"$RANK\" = 0 ]; then " + wait_for_rank1 + "kill -INT $$; fi; touch " + started + "; exec sleep 60"),
        opts);
    INFO(err);
    CHECK(status == 128 + SIGINT);
    CHECK(err.find("ringzero: rank 0 was killed by SIGINT (Interrupt); the launcher stopped the other ranks") !=
          std::string::npos);
  }
  SECTION("an exit status of 143 is an exit status, not a death by SIGTERM") {
    auto [status, err] = launch_capturing(sh("if [ \"$RANK\" = 1 ]; then exit 143; fi; exit 0"), opts);
    INFO(err);
    CHECK(status == 143);
    CHECK(err.find("killed by") == std::string::npos);
    CHECK(err.find("rank 1 stopped after a signal (exit status 143)") != std::string::npos);
  }
}
