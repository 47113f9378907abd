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

// The gather board (comm/transport/gather_board.h) that the small AllReduce uses from N = 3.

TEST_CASE("gather board: a thousand small AllReduces in a row, each with its own known sum") {
  // Every gather reuses one of two entries per rank: a rank that ran ahead into the next
  // gather must never overwrite an input another rank has not read yet.
  for (int N : {3, 4, 5}) {
    auto comms = make_thread_communicators(N, CommOptions{});
    auto errors = run_ranks(N, [&](int r) {
      for (int k = 0; k < 1000; ++k) {
        float v[3] = {float(k), float(r), float(k * N + r)};
        comms[r]->all_reduce(v, 3, DType::f32, ReduceOp::sum);
        const float ranks = float(N * (N - 1) / 2);
        if (v[0] != float(k * N) || v[1] != ranks || v[2] != float(k * N * N) + ranks)
          throw Error(strfmt("all_reduce %d: %g %g %g", k, v[0], v[1], v[2]));
      }
    });
    for (int r = 0; r < N; ++r) {
      INFO("N = " << N << ", rank " << r << ": " << errors[r]);
      CHECK(errors[r].empty());
    }
  }
}

TEST_CASE("gather board: ranks that post inputs of different sizes fail, naming the rank") {
  const int N = 3;
  CommOptions o;
  o.timeout_s = 30;
  auto comms = make_thread_communicators(N, o);
  auto errors = run_ranks(N, [&](int r) {
    std::vector<float> buf(8, 1.0f);
    comms[r]->all_reduce(buf.data(), r == 1 ? 5 : 4, DType::f32, ReduceOp::sum);
  });
  CHECK(errors[0].find("rank 1 posted a 20-byte input of another collective where a 16-byte one was expected") !=
        std::string::npos);
  for (int r = 0; r < N; ++r) {
    INFO("rank " << r << ": " << errors[r]);
    CHECK(errors[r].find("timed out") == std::string::npos);
  }
}

TEST_CASE("gather board: a rank on the ring while the others wait on the board is an error, not a hang") {
  const int N = 3;
  CommOptions o;
  o.timeout_s = 30;  // a hang would end in "timed out", which no rank may report
  auto comms = make_thread_communicators(N, o);
  auto errors = run_ranks(N, [&](int r) {
    std::vector<float> buf(1000, 1.0f);
    comms[r]->all_reduce(buf.data(), r == 1 ? 1000 : 4, DType::f32, ReduceOp::sum);
  });
  CHECK(errors[2].find("rank 1 sent a ring message while this rank waits on the gather board") != std::string::npos);
  for (int r = 0; r < N; ++r) {
    INFO("rank " << r << ": " << errors[r]);
    CHECK(!errors[r].empty());
    CHECK(errors[r].find("timed out") == std::string::npos);
  }
}

TEST_CASE("gather board: a rank that never posts makes the others time out, naming it") {
  const int N = 3;
  CommOptions o;
  o.timeout_s = 1;
  auto comms = make_thread_communicators(N, o);
  auto errors = run_ranks(N, [&](int r) {
    if (r == 2) return;  // never arrives
    float v = 1.0f;
    comms[r]->all_reduce(&v, 1, DType::f32, ReduceOp::sum);
  });
  // The first to time out closes the board; the other may see that first. Both name rank 2.
  const std::string timed_out = "timed out after 1 s waiting for rank 2 to post its input to the gather board";
  CHECK((errors[0].find(timed_out) != std::string::npos || errors[1].find(timed_out) != std::string::npos));
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r << ": " << errors[r]);
    CHECK((errors[r].find(timed_out) != std::string::npos ||
           errors[r].find("closed the gather board (it failed) while rank 2 had not posted") != std::string::npos));
  }
}
