// Tests of the ring collectives on thread ranks: every op x dtype x sum/avg for N in 1..8
// and counts {0, 1, N-1, N+1, 1001}, with an 8-byte segment so every count above two
// elements takes the multi-segment path; byte counters against the ring formula.
#include <catch2/catch.hpp>

#include <cmath>

#include "base/check.h"
#include "comm/factory.h"
#include "comm/ring.h"
#include "test_comm_util.h"

using namespace rz;
using namespace rz::testing;

namespace {

CommOptions tiny_segments() {
  CommOptions o;
  o.segment_bytes = 8;
  o.timeout_s = 60;
  return o;
}

// Checks one collective kind for all counts on N thread ranks; returns failures as text.
void check_all(int N, DType dt) {
  auto comms = make_thread_communicators(N, tiny_segments());
  auto errors = run_ranks(N, [&](int r) {
    Communicator& c = *comms[r];
    for (size_t count : test_counts(N)) {
      ShardRange mine = shard_of(count, N, r);
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg}) {
        // AllReduce, in place.
        Tensor buf(dt, count);
        for (size_t i = 0; i < count; ++i) buf.set(i, value_of(r, i));
        c.reset_stats();
        c.all_reduce(buf.data(), count, dt, op);
        for (size_t i = 0; i < count; ++i)
          if (buf.get(i) != expected_reduce(N, i, op, dt))
            throw Error(strfmt("all_reduce N=%d count=%zu %s %s: element %zu is %g, expected %g", N, count,
                               dtype_name(dt), reduce_op_name(op), i, buf.get(i), expected_reduce(N, i, op, dt)));
        uint64_t want = rs_bytes_sent(count, N, r, dt) + ag_bytes_sent(count, N, r, dt);
        if (c.stats().by_kind[int(CollectiveKind::all_reduce)].bytes_sent != want)
          throw Error(strfmt("all_reduce N=%d count=%zu: sent %llu bytes, expected %llu", N, count,
                             (unsigned long long)c.stats().by_kind[int(CollectiveKind::all_reduce)].bytes_sent,
                             (unsigned long long)want));
        // ReduceScatter must give bitwise the same shard as AllReduce.
        Tensor in(dt, count), out(dt, mine.count);
        for (size_t i = 0; i < count; ++i) in.set(i, value_of(r, i));
        c.reduce_scatter(in.data(), out.data(), count, dt, op);
        for (size_t i = 0; i < mine.count; ++i)
          if (std::memcmp(&out.bytes[i * dtype_size(dt)], &buf.bytes[(mine.offset + i) * dtype_size(dt)],
                          dtype_size(dt)) != 0)
            throw Error(strfmt("reduce_scatter N=%d count=%zu %s: shard element %zu differs from all_reduce", N,
                               count, reduce_op_name(op), i));
        for (size_t i = 0; i < count; ++i)
          if (in.get(i) != value_of(r, i)) throw Error("reduce_scatter modified its input");
        if (c.stats().by_kind[int(CollectiveKind::reduce_scatter)].bytes_sent != rs_bytes_sent(count, N, r, dt))
          throw Error(strfmt("reduce_scatter N=%d count=%zu: wrong byte count", N, count));
      }
      // AllGather, out of place and in place.
      Tensor shard(dt, mine.count), out(dt, count), inplace(dt, count);
      for (size_t i = 0; i < mine.count; ++i) {
        shard.set(i, gather_value(mine.offset + i));
        inplace.set(mine.offset + i, gather_value(mine.offset + i));
      }
      c.all_gather(shard.data(), out.data(), count, dt);
      c.all_gather(&inplace.bytes[mine.offset * dtype_size(dt)], inplace.data(), count, dt);
      for (size_t i = 0; i < count; ++i)
        if (out.get(i) != gather_value(i) || inplace.get(i) != gather_value(i))
          throw Error(strfmt("all_gather N=%d count=%zu: element %zu is %g / %g, expected %g", N, count, i,
                             out.get(i), inplace.get(i), gather_value(i)));
      if (c.stats().by_kind[int(CollectiveKind::all_gather)].bytes_sent != 2 * ag_bytes_sent(count, N, r, dt))
        throw Error(strfmt("all_gather N=%d count=%zu: wrong byte count", N, count));
      // Broadcast from every root.
      for (int root = 0; root < N; ++root) {
        Tensor b(dt, count);
        for (size_t i = 0; i < count; ++i) b.set(i, r == root ? gather_value(i) + root : -1.0f);
        c.broadcast(b.data(), count, dt, root);
        for (size_t i = 0; i < count; ++i)
          if (b.get(i) != gather_value(i) + root)
            throw Error(strfmt("broadcast N=%d count=%zu root=%d: element %zu wrong", N, count, root, i));
      }
      c.barrier();
    }
  });
  for (int r = 0; r < N; ++r) {
    INFO("rank " << r << ": " << errors[r]);
    CHECK(errors[r].empty());
  }
}

}  // namespace

TEST_CASE("shard_of: ceil-sized shards, trailing ones shorter or empty") {
  REQUIRE(shard_of(10, 4, 0).count == 3);
  REQUIRE(shard_of(10, 4, 3).offset == 9);
  REQUIRE(shard_of(10, 4, 3).count == 1);
  REQUIRE(shard_of(5, 4, 3).count == 0);  // S = 2: shards 2, 2, 1, 0
  REQUIRE(shard_of(5, 4, 3).offset == 5);
  REQUIRE(shard_of(0, 3, 1).count == 0);
  REQUIRE_THROWS_AS(shard_of(4, 2, 2), Error);
}

TEST_CASE("reduce_elements: bf16 adds in fp32 and rounds once, avg divides after the sum") {
  bf16 a[1] = {float_to_bf16(1.0f)}, b[1] = {float_to_bf16(std::ldexp(1.0f, -8))}, d[1];
  reduce_elements(DType::bf16, d, a, b, 1, 0);
  REQUIRE(bf16_to_float(d[0]) == 1.0f);  // 1 + 2^-8 ties to even
  float x[2] = {3, 1}, y[2] = {4, 1}, z[2];
  reduce_elements(DType::f32, z, x, y, 2, 2);
  REQUIRE(z[0] == 3.5f);
  REQUIRE(z[1] == 1.0f);
}

TEST_CASE("ring collectives on thread ranks, fp32, N = 1..8") {
  for (int N = 1; N <= 8; ++N) {
    INFO("N = " << N);
    check_all(N, DType::f32);
  }
}

TEST_CASE("ring collectives on thread ranks, bf16, N = 1..8") {
  for (int N = 1; N <= 8; ++N) {
    INFO("N = " << N);
    check_all(N, DType::bf16);
  }
}

TEST_CASE("AllReduce sends exactly 2(N-1)/N x M per rank when N divides the count") {
  const int N = 4;
  const size_t count = 4096;
  CommOptions o;
  o.segment_bytes = 1000;  // not a multiple of the element size: segments of 250 floats
  auto comms = make_thread_communicators(N, o);
  run_ranks(N, [&](int r) {
    std::vector<float> buf(count, 1.0f);
    comms[r]->all_reduce(buf.data(), count, DType::f32, ReduceOp::sum);
  });
  for (int r = 0; r < N; ++r) {
    const auto& c = comms[r]->stats().by_kind[int(CollectiveKind::all_reduce)];
    REQUIRE(c.calls == 1);
    REQUIRE(c.bytes_sent == 2 * (N - 1) * count * 4 / N);
    REQUIRE(c.bytes_recv == 2 * (N - 1) * count * 4 / N);
    REQUIRE(c.seconds > 0);
  }
}
