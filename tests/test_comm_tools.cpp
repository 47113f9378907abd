// Tests of the comm subcommands through the real binary: comm-trace prints the seed
// article's AllGather table (docs/comm.md), comm-bench checks its results on processes it launches.
#include <catch2/catch.hpp>

#include <string>

#include "run_ringzero.h"

using rz::test::run_ringzero;

TEST_CASE("comm-trace all_gather prints the seed article's round tables") {
  auto [rc, out] = run_ringzero("comm-trace --op all_gather --nranks 4");
  INFO(out);
  REQUIRE(rc == 0);
  CHECK(out.find("| rank 0 | A -> rank 1 | D <- rank 3 | A, D ") != std::string::npos);
  CHECK(out.find("| rank 2 | A -> rank 3 | D <- rank 1 | A, B, C, D ") != std::string::npos);
}

TEST_CASE("comm-trace reduce_scatter ends with chunk r on rank r") {
  auto [rc, out] = run_ringzero("comm-trace --op reduce_scatter --nranks 4");
  INFO(out);
  REQUIRE(rc == 0);
  CHECK(out.find("| rank 0 | b0+c0+d0+a0  (chunk 0)") != std::string::npos);
  CHECK(out.find("| rank 3 | a3+b3+c3+d3  (chunk 3)") != std::string::npos);
}

TEST_CASE("comm-bench launches its ranks, checks every size and reports JSON") {
  for (const char* transport : {"shm", "tcp"}) {
    auto [rc, out] = run_ringzero(std::string("comm-bench --nproc 3 --transport ") + transport +
                                  " --max-bytes 64K --iters 2 --warmup 1 --segment-bytes 4K --json");
    INFO(out);
    REQUIRE(rc == 0);
    CHECK(out.find("\"wrong\":0") != std::string::npos);
    CHECK(out.find("\"wrong\":1") == std::string::npos);
    // 64 KiB AllReduce on 3 ranks: count 16384, chunks 5462, 5461, 5461 -> rank 0 sends
    // (16384 - 5462) + (16384 - 5461) floats = 87376 bytes.
    CHECK(out.find("\"bytes\":65536,\"bytes_sent_per_rank\":87376") != std::string::npos);
  }
}

TEST_CASE("comm-bench rejects bad flags with one line") {
  auto [rc, out] = run_ringzero("comm-bench --max-bytes 12Q");
  CHECK(rc != 0);
  CHECK(out.find("--max-bytes") != std::string::npos);
}
