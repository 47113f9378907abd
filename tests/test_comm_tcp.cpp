// Tests of the tcp transport with real processes: every op x dtype x sum/avg for N in 1..8
// and counts {0, 1, N-1, N+1, 1001}, tiny segments, byte counters against the formula.
// The checks themselves live in test_comm_procs.h, shared with the other process transport.
// And a rank's listener under strangers: idle ones, one without the token, one claiming
// another rank (ranks as threads here).
#include <catch2/catch.hpp>

#include <cstring>
#include <memory>
#include <thread>

#include "comm/rendezvous/job_auth.h"
#include "comm/transport/transports.h"
#include "test_comm_procs.h"
#include "test_comm_util.h"

using namespace rz::testing;

TEST_CASE("tcp transport: every collective, N = 1..8, fp32 and bf16") { check_transport_collectives("tcp"); }

TEST_CASE("tcp transport: a 1 MiB AllReduce with default segments sends 2(N-1)/N x M") {
  check_transport_allreduce_bytes("tcp");
}

TEST_CASE("tcp transport: strangers on a rank's port neither get in nor keep its left neighbour out") {
  using namespace rz;
  StoreServer server("127.0.0.1", 0, "tok");
  CommOptions opts;
  opts.timeout_s = 30;
  opts.segment_bytes = 4096;
  auto env_of = [&](int r) {
    RankEnv e;
    e.rank = r;
    e.world_size = 2;
    e.master_port = server.port();
    e.job_token = "tok";
    return e;
  };
  std::unique_ptr<RingChannel> ch[2];
  std::string err[2];
  auto rank = [&](int r) {
    return std::thread([&, r] {
      try {
        StoreClient store("127.0.0.1", server.port(), "tok", 30);
        ch[r] = connect_tcp_channel(env_of(r), opts, store);
      } catch (const std::exception& e) {
        err[r] = e.what();
      }
    });
  };
  std::thread r0 = rank(0);
  // Rank 0 listens and waits for rank 1; the stranger finds its port (as `ss -ltn` would).
  StoreClient look("127.0.0.1", server.port(), "tok", 30);
  const std::string addr = look.get("tcp/0");
  CHECK(addr.rfind("127.0.0.1:", 0) == 0);  // its own address, not every interface
  const int port = std::atoi(addr.c_str() + addr.rfind(':') + 1);
  std::vector<Socket> idle;
  for (int i = 0; i < 300; ++i) idle.push_back(Socket::connect_to("127.0.0.1", port, now_s() + 5, "stranger"));
  REQUIRE_THROWS_WITH(connect_with_proof("127.0.0.1", port, "not-the-token", "tcp", "rank 1", now_s() + 20, "stranger"),
                      Catch::Contains("wrong RINGZERO_JOB_TOKEN"));
  REQUIRE_THROWS_WITH(connect_with_proof("127.0.0.1", port, "tok", "tcp", "rank 5", now_s() + 20, "duplicate"),
                      Catch::Contains("waits for rank 1"));
  std::thread r1 = rank(1);
  r0.join();
  r1.join();
  INFO(err[0] << " | " << err[1]);
  REQUIRE(ch[0] != nullptr);
  REQUIRE(ch[1] != nullptr);
  const int sent = 12345;
  ch[0]->send(&sent, sizeof sent, MsgTag::data);
  int got = 0;
  ch[1]->recv(sizeof got, MsgTag::data, [&](const void* p) { std::memcpy(&got, p, sizeof got); });
  CHECK(got == sent);
}
