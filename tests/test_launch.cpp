// Tests of comm/launch: the launcher sets the rank variables, and one failing rank stops
// the others promptly with that rank's status. The children are small shell scripts.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "base/clock.h"
#include "comm/launch.h"

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

TEST_CASE("the launcher reports the earliest failure, not a knock-on one (issue 11)") {
  LaunchOptions opts;
  opts.nproc_per_node = 3;
  opts.stop_grace_s = 2.0;
  // Rank 2 fails first; ranks 0 and 1 fail a moment later because their peer went away.
  int status = launch_local_ranks(
      sh("if [ \"$RANK\" = 2 ]; then echo 'disk full' >&2; exit 7; fi; sleep 0.01; "
         "echo 'rank 2 closed the connection' >&2; exit 1"),
      opts);
  CHECK(status == 7);
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
