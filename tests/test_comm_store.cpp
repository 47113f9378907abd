// Tests of the rendezvous store: set/get across clients, get's timeout, and that a wrong
// token, a garbage message and an oversized frame are refused while others are served.
#include <catch2/catch.hpp>

#include <thread>

#include "comm/factory.h"
#include "comm/socket.h"
#include "comm/store.h"

using namespace rz;

TEST_CASE("store: set and blocking get between clients") {
  StoreServer server(0, "tok123");
  StoreClient a("127.0.0.1", server.port(), "tok123", 5.0);
  StoreClient b("127.0.0.1", server.port(), "tok123", 5.0);
  std::thread t([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    a.set("shm/1", "/ringzero-x");
  });
  REQUIRE(b.get("shm/1") == "/ringzero-x");  // waits for the set
  t.join();
  a.set("empty", "");
  REQUIRE(b.get("empty") == "");
}

TEST_CASE("store: get times out with the key named") {
  StoreServer server(0, "tok");
  StoreClient a("127.0.0.1", server.port(), "tok", 0.3);
  REQUIRE_THROWS_WITH(a.get("never"), Catch::Contains("timed out") && Catch::Contains("'never'"));
}

TEST_CASE("store: refuses a wrong token, garbage and oversized frames, and keeps serving") {
  StoreServer server(0, "right-token");
  StoreClient good("127.0.0.1", server.port(), "right-token", 5.0);
  good.set("k", "v1");

  REQUIRE_THROWS_WITH(StoreClient("127.0.0.1", server.port(), "wrong-token", 5.0),
                      Catch::Contains("wrong RINGZERO_JOB_TOKEN"));

  {  // garbage instead of a hello
    Socket s = Socket::connect_to("127.0.0.1", server.port(), now_s() + 5, "test");
    const char junk[] = "\x05\x00\x00\x00GET / HTTP/1.0\r\n\r\n";
    s.write_all(junk, sizeof junk - 1, now_s() + 5);
    char c;
    REQUIRE_THROWS_AS(s.read_all(&c, 1, now_s() + 5), SocketClosed);
  }
  {  // a frame length far past the cap: refused without allocating it
    Socket s = Socket::connect_to("127.0.0.1", server.port(), now_s() + 5, "test");
    uint32_t huge = 0xfffffff0u;
    s.write_all(&huge, 4, now_s() + 5);
    char c;
    REQUIRE_THROWS_AS(s.read_all(&c, 1, now_s() + 5), SocketClosed);
  }
  {  // the right token, then a malformed request
    Socket s = Socket::connect_to("127.0.0.1", server.port(), now_s() + 5, "test");
    std::string hello = "RZ1 right-token";
    uint32_t n = static_cast<uint32_t>(hello.size());
    s.write_all(&n, 4, now_s() + 5);
    s.write_all(hello.data(), hello.size(), now_s() + 5);
    char ok[6];
    REQUIRE(s.read_all(ok, 6, now_s() + 5));
    uint32_t m = 3;
    s.write_all(&m, 4, now_s() + 5);
    s.write_all("X\x01\x02", 3, now_s() + 5);
    char c;
    REQUIRE_THROWS_AS(s.read_all(&c, 1, now_s() + 5), SocketClosed);
  }
  // The store still serves the good client, and a new one.
  good.set("k", "v2");
  StoreClient late("127.0.0.1", server.port(), "right-token", 5.0);
  REQUIRE(late.get("k") == "v2");
  REQUIRE(server.refused() == 4);
}

TEST_CASE("rank_env_from_environment reads torchrun names and rejects bad values") {
  setenv("RANK", "2", 1);
  setenv("WORLD_SIZE", "4", 1);
  setenv("LOCAL_RANK", "2", 1);
  setenv("MASTER_ADDR", "10.0.0.1", 1);
  setenv("MASTER_PORT", "1234", 1);
  setenv("RINGZERO_JOB_TOKEN", "abc", 1);
  RankEnv e = rank_env_from_environment();
  REQUIRE(e.rank == 2);
  REQUIRE(e.world_size == 4);
  REQUIRE(e.master_addr == "10.0.0.1");
  REQUIRE(e.master_port == 1234);
  REQUIRE(e.job_token == "abc");
  setenv("RANK", "x", 1);
  REQUIRE_THROWS_WITH(rank_env_from_environment(), Catch::Contains("RANK") && Catch::Contains("'x'"));
  setenv("RANK", "4", 1);
  REQUIRE_THROWS_WITH(rank_env_from_environment(), Catch::Contains("not below WORLD_SIZE"));
  for (const char* v : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "RINGZERO_JOB_TOKEN"}) unsetenv(v);
  setenv("SLURM_PROCID", "1", 1);
  setenv("SLURM_NTASKS", "3", 1);
  e = rank_env_from_environment();
  REQUIRE(e.rank == 1);
  REQUIRE(e.world_size == 3);
  REQUIRE(std::string(e.launcher) == "srun");
  unsetenv("SLURM_PROCID");
  unsetenv("SLURM_NTASKS");
}

TEST_CASE("rank_env_from_environment takes all of a rank's numbers from one launcher") {
  // A one-task SLURM allocation is not a job of ranks (ringzero may launch its own there).
  setenv("SLURM_PROCID", "0", 1);
  setenv("SLURM_NTASKS", "1", 1);
  RankEnv e = rank_env_from_environment();
  CHECK(std::string(e.launcher).empty());
  CHECK(e.world_size == 1);
  // torchrun's variables win over SLURM's and are not mixed with them.
  setenv("SLURM_PROCID", "1", 1);
  setenv("SLURM_NTASKS", "3", 1);
  setenv("RANK", "0", 1);
  e = rank_env_from_environment();
  CHECK(std::string(e.launcher) == "torchrun");
  CHECK(e.rank == 0);
  CHECK(e.world_size == 1);
  for (const char* v : {"RANK", "SLURM_PROCID", "SLURM_NTASKS"}) unsetenv(v);
  CHECK(std::string(rank_env_from_environment().launcher).empty());
}
