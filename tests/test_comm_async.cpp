// Tests of async collectives, issue order, and failures on thread ranks: a closed peer,
// a silent peer (timeout), and RINGZERO_COMM_DEBUG's fingerprint check.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>

#include "base/clock.h"
#include "comm/factory.h"
#include "test_comm_util.h"

using namespace rz;
using namespace rz::testing;

TEST_CASE("async collectives run in issue order and call OnDone on success") {
  const int N = 3;
  CommOptions o;
  o.segment_bytes = 64;
  auto comms = make_thread_communicators(N, o);
  auto errors = run_ranks(N, [&](int r) {
    Communicator& c = *comms[r];
    std::vector<std::vector<float>> bufs(5, std::vector<float>(100));
    std::vector<int> order;
    std::vector<WorkHandle> hs;
    for (int k = 0; k < 5; ++k) {
      for (size_t i = 0; i < 100; ++i) bufs[k][i] = float(k * 1000 + r);
      hs.push_back(c.all_reduce_async(bufs[k].data(), 100, DType::f32, ReduceOp::sum, [&order, k] { order.push_back(k); }));
    }
    std::vector<float> out(100), shard(34, float(r));
    auto h = c.all_gather_async(shard.data(), out.data(), 100, DType::f32);
    // A blocking call issued after async ones runs after them.
    std::vector<float> b(10, 1.0f);
    c.all_reduce(b.data(), 10, DType::f32, ReduceOp::avg);
    RANK_REQUIRE(h->done());
    for (auto& w : hs) w->wait();
    h->wait();
    RANK_REQUIRE(order == std::vector<int>({0, 1, 2, 3, 4}));
    for (int k = 0; k < 5; ++k) RANK_REQUIRE(bufs[k][7] == float(N * k * 1000 + 0 + 1 + 2));
    RANK_REQUIRE(out[0] == 0.0f);
    RANK_REQUIRE(out[99] == 2.0f);
    RANK_REQUIRE(b[3] == 1.0f);
  });
  for (auto& e : errors) CHECK(e == "");
}

TEST_CASE("a stream-form OnDone runs after the collective on host buffers, with stream null") {
  const int N = 2;
  auto comms = make_thread_communicators(N, CommOptions{});
  auto errors = run_ranks(N, [&](int r) {
    std::vector<float> buf(50, float(r + 1));
    std::atomic<int> calls{0};
    void* seen = &calls;
    float value_seen = 0.0f;
    auto h = comms[r]->all_reduce_async(buf.data(), buf.size(), DType::f32, ReduceOp::sum,
                                        OnDone::on_stream([&](void* stream) {
                                          seen = stream;
                                          value_seen = buf[49];  // the result is there
                                          ++calls;
                                        }));
    h->wait();
    RANK_REQUIRE(calls == 1);
    RANK_REQUIRE(seen == nullptr);
    RANK_REQUIRE(value_seen == 3.0f);
  });
  for (auto& e : errors) CHECK(e == "");
}

TEST_CASE("a closed peer fails every other rank promptly with rank, peer and collective named") {
  const int N = 4;
  CommOptions o;
  o.timeout_s = 30;
  auto comms = make_thread_communicators(N, o);
  auto t0 = Clock::now();
  auto errors = run_ranks(N, [&](int r) {
    if (r == 2) {
      comms[2].reset();  // rank 2 goes away: its destructor closes its channels
      return;
    }
    std::vector<float> buf(1000, 1.0f);
    comms[r]->all_reduce(buf.data(), buf.size(), DType::f32, ReduceOp::sum);
  });
  double secs = seconds_since(t0);
  REQUIRE(secs < 5.0);
  REQUIRE(errors[3].find("rank 3: all_reduce #1: peer rank 2 closed the channel") != std::string::npos);
  for (int r : {0, 1, 3}) REQUIRE(errors[r].find("closed the channel") != std::string::npos);
  // The communicator stays broken and says why.
  std::vector<float> b(4);
  REQUIRE_THROWS_WITH(comms[3]->all_reduce(b.data(), 4, DType::f32, ReduceOp::sum),
                      Catch::Contains("unusable after this error"));
}

TEST_CASE("an async collective's error comes back from wait()") {
  const int N = 2;
  auto comms = make_thread_communicators(N, CommOptions{});
  comms[1].reset();
  std::vector<float> buf(10, 1.0f);
  std::atomic<bool> called{false};
  auto h = comms[0]->all_reduce_async(buf.data(), 10, DType::f32, ReduceOp::sum, [&] { called = true; });
  REQUIRE_THROWS_WITH(h->wait(), Catch::Contains("peer rank 1 closed the channel"));
  REQUIRE(!called);
}

TEST_CASE("a silent peer makes the collective time out instead of hanging") {
  const int N = 2;
  CommOptions o;
  o.timeout_s = 0.5;
  auto comms = make_thread_communicators(N, o);
  std::vector<float> buf(10, 1.0f);
  auto t0 = Clock::now();
  REQUIRE_THROWS_WITH(comms[0]->all_reduce(buf.data(), 10, DType::f32, ReduceOp::sum),
                      Catch::Contains("rank 0: all_reduce #1: timed out after 0 s waiting for rank 1") ||
                          Catch::Contains("rank 0: all_reduce #1: timed out after 1 s waiting for rank 1"));
  double secs = seconds_since(t0);
  REQUIRE(secs < 3.0);
}

TEST_CASE("RINGZERO_COMM_DEBUG reports the first disagreement") {
  const int N = 3;
  CommOptions o;
  o.debug = true;
  o.timeout_s = 10;
  auto comms = make_thread_communicators(N, o);
  auto errors = run_ranks(N, [&](int r) {
    std::vector<float> buf(20, 1.0f);
    comms[r]->all_reduce(buf.data(), 10, DType::f32, ReduceOp::sum);  // all agree
    comms[r]->all_reduce(buf.data(), r == 1 ? 11 : 10, DType::f32, ReduceOp::sum);
  });
  // Rank 2 sees its left neighbour (rank 1) disagree; rank 1 sees rank 0 disagree.
  REQUIRE(errors[2].find("rank 2: all_reduce #2: collective mismatch") != std::string::npos);
  REQUIRE(errors[2].find("rank 1 runs #2 all_reduce(fp32, count 11, sum)") != std::string::npos);
  REQUIRE(errors[1].find("collective mismatch") != std::string::npos);
}

TEST_CASE("without debug, a size mismatch is still an error, not a hang") {
  const int N = 2;
  CommOptions o;
  o.timeout_s = 10;
  auto comms = make_thread_communicators(N, o);
  auto errors = run_ranks(N, [&](int r) {
    std::vector<float> buf(20, 1.0f);
    comms[r]->all_reduce(buf.data(), r == 0 ? 10 : 12, DType::f32, ReduceOp::sum);
  });
  REQUIRE((errors[0].find("not running the same collective") != std::string::npos ||
           errors[1].find("not running the same collective") != std::string::npos));
}
