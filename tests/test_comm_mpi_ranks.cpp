// tests/test_comm_mpi_ranks.cpp: one rank of the `--comm mpi` checks; test_comm_mpi runs it
// under mpirun (-np 2 and -np 3, so shards are uneven).
//
//   test_comm_mpi_ranks            every collective, blocking and async, fp32 and bf16, sum
//                                  and avg, counts that N does or does not divide; exit 0
//   test_comm_mpi_ranks timeout [DIR]   rank 1 skips a collective: rank 0 must fail within its
//                                  3 s timeout with an error that names it and the collective
//                                  (and writes its flight record into DIR)
//   test_comm_mpi_ranks mismatch DIR    --comm-debug, and rank 1 runs another count at #2:
//                                  both fail before any data moves, naming both sides, and
//                                  their flight records in DIR say so
//
// Inputs are small integers, so every sum is exact and the expected values are closed-form.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "base/bf16.h"
#include "base/check.h"
#include "comm/factory.h"

namespace {

using namespace rz;

float value(int rank, size_t i) { return static_cast<float>(static_cast<int>((i * 7 + rank * 13) % 23) - 11); }

struct Checker {
  int rank;
  int failures = 0;
  void expect(bool ok, const std::string& what) {
    if (ok) return;
    if (failures++ < 10) std::fprintf(stderr, "rank %d: FAILED: %s\n", rank, what.c_str());
  }
};

std::vector<unsigned char> make(DType dt, size_t n) { return std::vector<unsigned char>(n * dtype_size(dt) + 8); }
void put(DType dt, std::vector<unsigned char>& b, size_t i, float v) {
  if (dt == DType::f32) std::memcpy(&b[i * 4], &v, 4);
  else {
    bf16 h = float_to_bf16(v);
    std::memcpy(&b[i * 2], &h, 2);
  }
}
float get(DType dt, const std::vector<unsigned char>& b, size_t i) {
  if (dt == DType::f32) {
    float v;
    std::memcpy(&v, &b[i * 4], 4);
    return v;
  }
  bf16 h;
  std::memcpy(&h, &b[i * 2], 2);
  return bf16_to_float(h);
}

float expected_sum(int N, size_t i, DType dt, ReduceOp op) {
  float s = 0;
  for (int q = 0; q < N; ++q) s += value(q, i);
  float v = op == ReduceOp::avg ? s / static_cast<float>(N) : s;
  return dt == DType::bf16 ? bf16_to_float(float_to_bf16(v)) : v;
}

void check_all(Communicator& c, Checker& ck) {
  const int N = c.size(), r = c.rank();
  ck.expect(c.transport_name() == "mpi", "transport_name is " + c.transport_name());
  for (DType dt : {DType::f32, DType::bf16})
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg})
      for (size_t count : {size_t(0), size_t(1), size_t(2), size_t(5), size_t(1000), size_t(100003)}) {
        const std::string tag = strfmt("%s %s count %zu", dtype_name(dt), reduce_op_name(op), count);
        const ShardRange mine = shard_of(count, N, r);
        // all_reduce
        auto full = make(dt, count);
        for (size_t i = 0; i < count; ++i) put(dt, full, i, value(r, i));
        c.all_reduce(full.data(), count, dt, op);
        bool ok = true;
        for (size_t i = 0; i < count; ++i) ok &= get(dt, full, i) == expected_sum(N, i, dt, op);
        ck.expect(ok, "all_reduce " + tag);
        // reduce_scatter, then all_gather of its shard: the same as all_reduce
        auto in = make(dt, count), shard = make(dt, mine.count), gathered = make(dt, count);
        for (size_t i = 0; i < count; ++i) put(dt, in, i, value(r, i));
        c.reduce_scatter(in.data(), shard.data(), count, dt, op);
        ok = true;
        for (size_t i = 0; i < mine.count; ++i) ok &= get(dt, shard, i) == expected_sum(N, mine.offset + i, dt, op);
        ck.expect(ok, "reduce_scatter " + tag);
        c.all_gather(shard.data(), gathered.data(), count, dt);
        ck.expect(std::memcmp(gathered.data(), full.data(), count * dtype_size(dt)) == 0,
                  "all_gather(reduce_scatter) == all_reduce " + tag);
        // in-place all_gather
        auto inplace = make(dt, count);
        for (size_t i = 0; i < count; ++i) put(dt, inplace, i, i >= mine.offset && i < mine.offset + mine.count ? float(int(i % 241)) : -1.f);
        c.all_gather(inplace.data() + mine.offset * dtype_size(dt), inplace.data(), count, dt);
        ok = true;
        for (size_t i = 0; i < count; ++i) ok &= get(dt, inplace, i) == float(int(i % 241));
        ck.expect(ok, "in-place all_gather " + tag);
      }
  // broadcast from every root
  for (int root = 0; root < N; ++root) {
    std::vector<float> b(777);
    for (size_t i = 0; i < b.size(); ++i) b[i] = r == root ? float(i + root) : -5.f;
    c.broadcast(b.data(), b.size(), DType::f32, root);
    bool ok = true;
    for (size_t i = 0; i < b.size(); ++i) ok &= b[i] == float(i + root);
    ck.expect(ok, strfmt("broadcast from root %d", root));
  }
  c.barrier();

  // async: issued back to back, run in issue order on the comm thread, on_done after each
  c.reset_stats();
  const size_t n = 4099;
  std::vector<float> a(n), rs_in(n), rs_out(shard_of(n, N, r).count), g(n);
  for (size_t i = 0; i < n; ++i) a[i] = rs_in[i] = value(r, i);
  std::vector<int> order;
  std::vector<WorkHandle> hs;
  hs.push_back(c.all_reduce_async(a.data(), n, DType::f32, ReduceOp::sum, [&] { order.push_back(1); }));
  hs.push_back(c.reduce_scatter_async(rs_in.data(), rs_out.data(), n, DType::f32, ReduceOp::avg,
                                      [&] { order.push_back(2); }));
  hs.push_back(c.all_gather_async(rs_out.data(), g.data(), n, DType::f32, [&] { order.push_back(3); }));
  std::vector<float> bc(10, r == 0 ? 42.f : 0.f);
  hs.push_back(c.broadcast_async(bc.data(), bc.size(), DType::f32, 0, [&] { order.push_back(4); }));
  for (auto& h : hs) h->wait();
  for (auto& h : hs) ck.expect(h->done(), "async handle done after wait");
  ck.expect(order == std::vector<int>({1, 2, 3, 4}), "async on_done in issue order");
  bool ok = true;
  for (size_t i = 0; i < n; ++i) ok &= a[i] == expected_sum(N, i, DType::f32, ReduceOp::sum);
  for (size_t i = 0; i < n; ++i) ok &= g[i] == expected_sum(N, i, DType::f32, ReduceOp::avg);
  for (float x : bc) ok &= x == 42.f;
  ck.expect(ok, "async results");
  const CommStats& st = c.stats();
  ck.expect(st.by_kind[int(CollectiveKind::all_reduce)].calls == 1 && st.by_kind[int(CollectiveKind::reduce_scatter)].calls == 1 &&
                st.by_kind[int(CollectiveKind::all_gather)].calls == 1 && st.by_kind[int(CollectiveKind::broadcast)].calls == 1,
            "stats count one call of each async collective");
  const uint64_t phase = (n - shard_of(n, N, r).count) * 4;
  ck.expect(st.by_kind[int(CollectiveKind::all_reduce)].bytes_sent == 2 * phase, "all_reduce bytes = 2(N-1)/N x M");
  // a blocking call after async ones waits for them (issue order)
  std::vector<float> one{float(r)};
  c.all_reduce_async(one.data(), 1, DType::f32, ReduceOp::sum);
  std::vector<float> two{1.f};
  c.all_reduce(two.data(), 1, DType::f32, ReduceOp::sum);
  ck.expect(one[0] == float(N * (N - 1) / 2) && two[0] == float(N), "blocking after async");
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  int rank = -1;
  try {
    RankEnv env = rank_env_from_environment();
    rank = env.rank;
    CommOptions opts;
    opts.backend = CommBackend::mpi;
    if (mode == "timeout") opts.timeout_s = 3.0;
    if (argc > 2) opts.flight_dir = argv[2];
    opts.debug = mode == "mismatch";
    auto c = connect_communicator(env, opts);
    if (mode == "mismatch") {
      std::vector<float> x(100, 1.f);
      c->all_reduce(x.data(), x.size(), DType::f32, ReduceOp::sum);  // #1 agrees
      try {
        c->all_reduce(x.data(), c->rank() == 1 ? 50 : 100, DType::f32, ReduceOp::sum);
        std::fprintf(stderr, "rank %d: FAILED: the mismatched all_reduce #2 completed\n", c->rank());
      } catch (const std::exception& e) {
        std::fprintf(stderr, "caught: %s\n", e.what());
      }
      std::fflush(stderr);
      std::_Exit(3);
    }
    if (mode == "timeout") {
      std::vector<float> x(16, 1.f);
      c->all_reduce(x.data(), x.size(), DType::f32, ReduceOp::sum);  // both ranks: #1
      if (c->rank() == 1) {
        sleep(8);  // skips #2 and leaves without finalizing; mpirun then ends the job
        std::_Exit(3);
      }
      try {
        c->all_reduce(x.data(), x.size(), DType::f32, ReduceOp::sum);
        std::fprintf(stderr, "rank 0: FAILED: all_reduce #2 completed without rank 1\n");
      } catch (const std::exception& e) {
        std::fprintf(stderr, "caught: %s\n", e.what());
      }
      std::fflush(stderr);
      std::_Exit(3);
    }
    Checker ck{c->rank()};
    check_all(*c, ck);
    if (ck.failures == 0) std::printf("rank %d of %d: ok\n", c->rank(), c->size());
    return ck.failures == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: error: %s\n", rank, e.what());
    return 1;
  }
}
