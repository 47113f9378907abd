// Tests of the comm subcommands through the real binary: comm-trace prints the seed
// article's AllGather table, comm-bench checks its results on processes it launches.
#include <catch2/catch.hpp>

#include <cstdio>
#include <string>

namespace {

// Runs a shell command (bounded by timeout(1)); returns its stdout and sets rc.
std::string run(const std::string& cmd, int& rc) {
  std::string out;
  FILE* p = popen(("timeout 120 " + cmd + " 2>&1").c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int st = pclose(p);
  rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return out;
}

}  // namespace

TEST_CASE("comm-trace all_gather prints the article's round tables") {
  int rc = 0;
  std::string out = run(std::string(RINGZERO_BINARY) + " comm-trace --op all_gather --nranks 4", rc);
  INFO(out);
  REQUIRE(rc == 0);
  CHECK(out.find("| rank 0 | A -> rank 1 | D <- rank 3 | A, D ") != std::string::npos);
  CHECK(out.find("| rank 2 | A -> rank 3 | D <- rank 1 | A, B, C, D ") != std::string::npos);
}

TEST_CASE("comm-trace reduce_scatter ends with chunk r on rank r") {
  int rc = 0;
  std::string out = run(std::string(RINGZERO_BINARY) + " comm-trace --op reduce_scatter --nranks 4", rc);
  INFO(out);
  REQUIRE(rc == 0);
  CHECK(out.find("| rank 0 | b0+c0+d0+a0  (chunk 0)") != std::string::npos);
  CHECK(out.find("| rank 3 | a3+b3+c3+d3  (chunk 3)") != std::string::npos);
}

TEST_CASE("comm-bench launches its ranks, checks every size and reports JSON") {
  for (const char* transport : {"shm", "tcp"}) {
    int rc = 0;
    std::string out = run(std::string(RINGZERO_BINARY) + " comm-bench --nproc 3 --transport " + transport +
                              " --max-bytes 64K --iters 2 --warmup 1 --segment-bytes 4K --json",
                          rc);
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
  int rc = 0;
  std::string out = run(std::string(RINGZERO_BINARY) + " comm-bench --max-bytes 12Q", rc);
  CHECK(rc != 0);
  CHECK(out.find("--max-bytes") != std::string::npos);
}
