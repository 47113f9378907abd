// tests/test_comm_util.h: known-answer inputs and checks shared by the comm tests.
//
// Rank r's input element i is value_of(r, i): a small integer, so every partial sum of up
// to 8 ranks is exact in fp32 and in bf16 (|sum| <= 88 < 256) and the reduction is known
// without communicating. The expected avg is the fp32 sum divided by N, rounded once.
#pragma once

#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "base/bf16.h"
#include "base/check.h"
#include "comm/communicator.h"
#include "comm/ring/ring.h"

namespace rz::testing {

inline float value_of(int rank, size_t i) { return static_cast<float>(static_cast<int>((i * 7 + rank * 13) % 23) - 11); }
inline float gather_value(size_t i) { return static_cast<float>(static_cast<int>(i % 241)); }

inline float expected_reduce(int nranks, size_t i, ReduceOp op, DType dt) {
  float sum = 0;
  for (int r = 0; r < nranks; ++r) sum += value_of(r, i);
  float v = op == ReduceOp::avg ? sum / static_cast<float>(nranks) : sum;
  return dt == DType::bf16 ? bf16_to_float(float_to_bf16(v)) : v;
}

// A typed byte buffer filled / read as floats.
struct Tensor {
  DType dt;
  std::vector<unsigned char> bytes;
  Tensor(DType d, size_t n) : dt(d), bytes(n * dtype_size(d) + 1) {}  // +1: never a null data()
  void* data() { return bytes.data(); }
  void set(size_t i, float v) {
    if (dt == DType::f32) std::memcpy(&bytes[i * 4], &v, 4);
    else { bf16 h = float_to_bf16(v); std::memcpy(&bytes[i * 2], &h, 2); }
  }
  float get(size_t i) const {
    if (dt == DType::f32) { float v; std::memcpy(&v, &bytes[i * 4], 4); return v; }
    bf16 h; std::memcpy(&h, &bytes[i * 2], 2); return bf16_to_float(h);
  }
};

// Catch2's assertions are not thread-safe (ThreadSanitizer reports their counters): a rank
// thread checks with RANK_REQUIRE, whose failure comes back through run_ranks' errors.
#define RANK_REQUIRE(cond)                                                                        \
  do {                                                                                            \
    if (!(cond)) throw std::runtime_error(std::string(__FILE__) + ":" + std::to_string(__LINE__) + \
                                          ": RANK_REQUIRE(" #cond ") failed");                    \
  } while (0)

// Runs fn(rank) on one thread per rank; returns each rank's error message ("" if none).
inline std::vector<std::string> run_ranks(int nranks, const std::function<void(int)>& fn) {
  std::vector<std::string> errors(nranks);
  std::vector<std::thread> ts;
  for (int r = 0; r < nranks; ++r)
    ts.emplace_back([&, r] {
      try { fn(r); } catch (const std::exception& e) { errors[r] = e.what(); }
    });
  for (auto& t : ts) t.join();
  return errors;
}

// Bytes a rank sends in one ReduceScatter / AllGather phase: every chunk except the one
// it ends with (RS: its own, AG: its right neighbour's, which it never has to forward).
inline uint64_t rs_bytes_sent(size_t count, int N, int r, DType dt) {
  return N == 1 ? 0 : (count - shard_of(count, N, r).count) * dtype_size(dt);
}
inline uint64_t ag_bytes_sent(size_t count, int N, int r, DType dt) {
  return N == 1 ? 0 : (count - shard_of(count, N, (r + 1) % N).count) * dtype_size(dt);
}

// Bytes a rank sends in one AllReduce: both ring phases. An AllReduce of at most one
// segment and kSmallAllReduceBytes (N = 2) or kSmallAllReduceManyBytes (N >= 3) takes the
// small path (ring.h), which passes whole inputs: (N-1) x M, at N = 2 the same as the
// ring's two half-chunks.
// The collective tests use 8-byte segments. Device buffers (host_buffers false) always run
// the ring.
inline uint64_t ar_bytes_sent(size_t count, int N, int r, DType dt, size_t segment_bytes = 8, bool host_buffers = true) {
  const size_t bytes = count * dtype_size(dt);
  const size_t limit = N == 2 ? kSmallAllReduceBytes : kSmallAllReduceManyBytes;
  if (host_buffers && N >= 2 && bytes > 0 && bytes <= segment_bytes && bytes <= limit) return (N - 1) * bytes;
  return rs_bytes_sent(count, N, r, dt) + ag_bytes_sent(count, N, r, dt);
}

inline std::vector<size_t> test_counts(int N) {
  std::vector<size_t> c = {0, 1, static_cast<size_t>(N - 1), static_cast<size_t>(N + 1), 1001};
  return c;
}


// Runs every collective for every test count on one rank and throws rz::Error describing
// the first wrong element or byte count. All ranks of c must call it together.
inline void check_collectives(Communicator& c, DType dt) {
  const int N = c.size(), r = c.rank();
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
      uint64_t want = ar_bytes_sent(count, N, r, dt);
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
}

}  // namespace rz::testing
