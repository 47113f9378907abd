// Tests of the comm subcommands through the real binary: comm-trace prints the seed
// article's AllGather table (docs/comm.md), comm-bench checks its results on processes it launches.
#include <catch2/catch.hpp>

#include <string>
#include <nlohmann/json.hpp>

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

TEST_CASE("comm-trace --example runs the article's [1,2,3,4] and [5,6,7,8] through the ring") {
  auto [rc, out] = run_ringzero("comm-trace --example");
  INFO(out);
  REQUIRE(rc == 0);
  // AllGather: each rank's buffer after its one round.
  CHECK(out.find("receives chunk 1 from rank 1 and stores it: [1, 2, 3, 4 | 5, 6, 7, 8]") != std::string::npos);
  // ReduceScatter: rank 0 keeps the front half, rank 1 the back half.
  CHECK(out.find("receives chunk 0 from rank 1 and adds it to its own: [6, 8 | 3, 4]") != std::string::npos);
  CHECK(out.find("receives chunk 1 from rank 0 and adds it to its own: [5, 6 | 10, 12]") != std::string::npos);
  CHECK(out.find("rank 0 keeps chunk 0 [6, 8], rank 1 keeps chunk 1 [10, 12]") != std::string::npos);
  // AllReduce ends with the full sum everywhere; bytes come from the counters: 2(N-1)/N x 16.
  CHECK(out.find("both ranks hold [6, 8, 10, 12]") != std::string::npos);
  CHECK(out.find("bytes sent: rank 0 16, rank 1 16\n  (one chunk per phase") != std::string::npos);
  CHECK(out.find("leaves the reduced chunk r on rank r") != std::string::npos);
}

TEST_CASE("comm-trace --follow-chunk prints one chunk's path round by round") {
  rz::test::BinaryRun r = run_ringzero("comm-trace --op reduce_scatter --nranks 4 --follow-chunk 0");
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(r.output.find("round 1: rank 1 sends b0 -> rank 2, which adds c0: b0+c0\n") != std::string::npos);
  CHECK(r.output.find("round 3: rank 3 sends b0+c0+d0 -> rank 0, which adds a0: b0+c0+d0+a0  (finished, on rank 0)") !=
        std::string::npos);
  CHECK(r.output.find("article's 4-rank table") != std::string::npos);
  r = run_ringzero("comm-trace --op all_reduce --nranks 3 --follow-chunk 2");
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(r.output.find("round 2: rank 0 forwards S2 -> rank 1  (3 of 3 ranks hold it)") != std::string::npos);
  r = run_ringzero("comm-trace --nranks 3 --follow-chunk 3");
  CHECK(r.status != 0);
  CHECK(r.output.find("--follow-chunk: expected a chunk index 0..2") != std::string::npos);
}

// comm-bench's collective table (cli/cmd_comm_bench.cpp kCollectives), row by row: each --op
// runs its own collective (bytes sent per rank: 2(N-1)/N x M for AllReduce, (N-1)/N x M for
// ReduceScatter and AllGather), checks its own answer (#wrong 0) and reports its own
// bus-bandwidth factor (busbw / algbw, nccl-tests doc/PERFORMANCE.md).
TEST_CASE("comm-bench's table: each --op runs, checks and scales its own collective") {
  struct Row {
    const char* op;
    const char* sent;  // bytes one rank sends for M = 4096 on N = 4
    double bus_factor;
  };
  for (const Row& row : {Row{"all_reduce", "6144", 1.5}, Row{"reduce_scatter", "3072", 0.75},
                         Row{"all_gather", "3072", 0.75}}) {
    auto [rc, out] = run_ringzero(std::string("comm-bench --transport thread --nproc 4 --op ") + row.op +
                                  " --min-bytes 4K --max-bytes 4K --iters 1 --warmup 0 --json");
    INFO(row.op << "\n" << out);
    REQUIRE(rc == 0);
    const auto j = nlohmann::json::parse(out.substr(out.find('{')));
    CHECK(j["op"] == row.op);
    CHECK(j["wrong"] == 0);
    CHECK(j["bytes"] == 4096);
    CHECK(std::to_string(j["bytes_sent_per_rank"].get<uint64_t>()) == row.sent);
    const double algbw = j["algbw_gbps"], busbw = j["busbw_gbps"];
    REQUIRE(algbw > 0);
    CHECK(busbw / algbw == Approx(row.bus_factor).epsilon(1e-12));
  }
}

// comm-bench's ranks are the settings table's nproc_per_node and its untimed iterations
// --warmup-iters (train's --warmup is LR warm-up steps); the old spellings --nproc and
// --warmup stay as aliases of the same options (README, "Flag names").
TEST_CASE("comm-bench: --nproc and --warmup are aliases of --nproc-per-node and --warmup-iters") {
  for (const char* flags : {"--nproc 3 --warmup 2", "--nproc-per-node 3 --warmup-iters 2", "--nproc=3 --warmup-iters=2"}) {
    auto [rc, out] = run_ringzero(std::string("comm-bench --transport thread --min-bytes 1K --max-bytes 1K --iters 1 ") + flags);
    INFO(flags << "\n" << out);
    REQUIRE(rc == 0);
    CHECK(out.find("all_reduce, 3 ranks, transport thread") != std::string::npos);
    CHECK(out.find("1 iters after 2 warmup") != std::string::npos);
  }
  auto [rc, out] = run_ringzero("comm-bench --transport thread --nproc 65");
  CHECK(rc != 0);
  CHECK(out.find("--nproc") != std::string::npos);
}
