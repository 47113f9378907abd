// Tests of the shm transport with real processes: every op x dtype x sum/avg for N in 1..8
// and counts {0, 1, N-1, N+1, 1001}, tiny segments, byte counters against the formula.
#include <catch2/catch.hpp>

#include "test_comm_procs.h"
#include "test_comm_util.h"

using namespace rz;
using namespace rz::testing;

TEST_CASE("shm transport: every collective, N = 1..8, fp32 and bf16") {
  for (int N = 1; N <= 8; ++N) {
    CommOptions o;
    o.transport = "shm";
    o.segment_bytes = 8;
    o.timeout_s = 30;
    auto results = run_process_ranks(N, o, [&](Communicator& c) {
      if (c.transport_name() != "shm") throw Error("transport is " + c.transport_name());
      check_collectives(c, DType::f32);
      check_collectives(c, DType::bf16);
    });
    for (int r = 0; r < N; ++r) {
      INFO("N = " << N << ", rank " << r << ": " << results[r].error);
      CHECK(results[r].status == 0);
    }
  }
}

TEST_CASE("shm transport: a 1 MiB AllReduce with default segments sends 2(N-1)/N x M") {
  const int N = 4;
  CommOptions o;
  o.transport = "shm";
  o.timeout_s = 30;
  auto results = run_process_ranks(N, o, [&](Communicator& c) {
    const size_t count = 1 << 18;
    std::vector<float> buf(count);
    for (size_t i = 0; i < count; ++i) buf[i] = value_of(c.rank(), i);
    c.all_reduce(buf.data(), count, DType::f32, ReduceOp::sum);
    for (size_t i = 0; i < count; i += 997)
      if (buf[i] != expected_reduce(N, i, ReduceOp::sum, DType::f32)) throw Error(strfmt("element %zu wrong", i));
    const auto& s = c.stats().by_kind[int(CollectiveKind::all_reduce)];
    if (s.bytes_sent != 2 * (N - 1) * count * 4 / N || s.bytes_recv != s.bytes_sent)
      throw Error(strfmt("sent %llu bytes", (unsigned long long)s.bytes_sent));
  });
  for (int r = 0; r < N; ++r) {
    INFO("rank " << r << ": " << results[r].error);
    CHECK(results[r].status == 0);
  }
}
