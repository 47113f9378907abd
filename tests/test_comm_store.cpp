// Tests of the rendezvous store: set/get across clients, get's timeout, that a wrong
// token, a garbage message and an oversized frame are refused while others are served,
// and that a stranger's idle connections (hundreds, from one address or another) neither
// keep a real rank out nor stop a real job (the handshake itself: test_comm_auth.cpp).
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include "base/check.h"
#include "comm/factory.h"
#include "comm/rendezvous/agreement.h"
#include "comm/rendezvous/job_auth.h"
#include "comm/rendezvous/socket.h"
#include "comm/rendezvous/store.h"

using namespace rz;

namespace {

// A connection that proved the token by hand (what StoreClient does), for raw requests.
Socket proven_connection(int port, const std::string& token) {
  Socket s = Socket::connect_to("127.0.0.1", port, now_s() + 5, "test");
  ClientHandshake hs(token, "store", "", random_bytes(kNonceBytes));
  REQUIRE(s.write_frame(hs.hello(), now_s() + 5));
  std::string frame, reply;
  for (;;) {
    REQUIRE(s.read_frame(frame, 4096, now_s() + 5));
    const Verdict v = hs.on_frame(frame, reply);
    if (v == Verdict::kAdmitted) return s;
    REQUIRE(v == Verdict::kContinue);
    REQUIRE(s.write_frame(reply, now_s() + 5));
  }
}

// A connection from source_ip (any of 127/8 reaches a loopback listener): a stranger
// elsewhere. It sends nothing.
Socket idle_from(const std::string& source_ip, int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  Socket s(fd);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  inet_pton(AF_INET, source_ip.c_str(), &a.sin_addr);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) == 0);
  return s;
}

bool wait_until(const std::function<bool()>& f, double s) {
  const double end = now_s() + s;
  while (!f()) {
    if (now_s() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

}  // namespace

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
                      Catch::Contains("refused this rank") && Catch::Contains("wrong RINGZERO_JOB_TOKEN"));

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
    Socket s = proven_connection(server.port(), "right-token");
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

namespace {
using fs_iter = std::filesystem::directory_iterator;
// Virtual memory of this process in kB (/proc/self/status VmSize).
long vm_size_kb() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmSize:", 0) == 0) return std::stol(line.substr(7));
  return -1;
}
}  // namespace

TEST_CASE("store: 5000 connect/close cycles leave no threads or memory behind (issue 11)") {
  StoreServer server(0, "tok");
  // The acceptor may still be working through the kernel's queue of closed connections
  // when the loop ends: under TSan on 2 busy cores that took over 10 s (31 left, CI of
  // 2026-12-02) and once over 60 s. So the wait is for every connection made to have been
  // accepted and its thread to have ended, not for the first moment no thread is alive (the
  // CI of 2026-12-04 saw such a moment while the queue still held connections). A leaked
  // thread never ends, so the wait goes on while either count moves and gives up only after
  // 30 s without progress.
  size_t made = 0;
  auto settle = [&] {
    double last_progress = now_s();
    size_t accepted = server.accepted_connections(), live = server.live_connections();
    while ((accepted < made || live > 0) && now_s() - last_progress < 30) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      const size_t now_accepted = server.accepted_connections(), now_live = server.live_connections();
      if (now_accepted > accepted || now_live < live) last_progress = now_s();
      accepted = now_accepted;
      live = now_live;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the acceptor joins the finished
  };
  // Warm-up: malloc's per-thread arenas (bounded in number) are reserved by the first threads.
  for (int i = 0; i < 1000; ++i, ++made) Socket::connect_to("127.0.0.1", server.port(), now_s() + 5, "test");
  settle();
  const long before = vm_size_kb();
  const size_t threads_before = std::distance(fs_iter("/proc/self/task"), fs_iter());
  for (int i = 0; i < 5000; ++i, ++made) Socket::connect_to("127.0.0.1", server.port(), now_s() + 5, "test");
  settle();
  CHECK(server.accepted_connections() == made);
  CHECK(server.live_connections() == 0);
  CHECK(static_cast<size_t>(std::distance(fs_iter("/proc/self/task"), fs_iter())) <= threads_before + 2);
  // A leaked thread costs its 8 MiB stack of address space; 5000 of them 40 GB. What may
  // grow is glibc's per-thread malloc arenas: at most 8 per core, 64 MiB each, reserved once.
  const long arenas_kb = 8L * std::max(1u, std::thread::hardware_concurrency()) * 64 * 1024;
  CHECK(vm_size_kb() - before < arenas_kb + 256 * 1024);
  StoreClient c("127.0.0.1", server.port(), "tok", 5.0);
  c.set("still", "serving");
  CHECK(c.get("still") == "serving");
}

TEST_CASE("store: unproven connections past the limit make room (oldest first), never keep a rank out") {
  GateLimits limits;
  limits.max_pending = 8;
  limits.max_pending_per_peer = 8;
  limits.handshake_s = 60;  // longer than the test: only making room can free a place
  StoreServer server("127.0.0.1", 0, "tok", "", limits);
  std::vector<Socket> idle;
  for (int i = 0; i < 8; ++i) {
    idle.push_back(Socket::connect_to("127.0.0.1", server.port(), now_s() + 5, "test"));
    REQUIRE(wait_until([&] { return server.pending_connections() == idle.size(); }, 5));  // in order
  }
  StoreClient c("127.0.0.1", server.port(), "tok", 10.0);  // full, yet it gets in
  c.set("k", "v");
  CHECK(c.get("k") == "v");
  // The oldest idle one was told why it was dropped, and closed.
  std::string busy;
  REQUIRE(idle[0].read_frame(busy, 4096, now_s() + 5));
  CHECK_THAT(busy, Catch::StartsWith("BUSY "));
  char ch;
  CHECK_THROWS_AS(idle[0].read_all(&ch, 1, now_s() + 5), SocketClosed);
  CHECK(server.pending_connections() <= 8);
  CHECK(server.refused() >= 1);
}

TEST_CASE("store: 300 idle connections from a stranger do not stop two ranks from meeting") {
  StoreServer server("127.0.0.1", 0, "tok", "job-nonce");
  std::vector<Socket> idle;
  for (int i = 0; i < 300; ++i) idle.push_back(Socket::connect_to("127.0.0.1", server.port(), now_s() + 5, "test"));
  // All from 127.0.0.1: the store keeps at most a per-address bound of them waiting.
  REQUIRE(wait_until([&] { return server.refused() >= 300 - GateLimits{}.max_pending_per_peer; }, 20));
  CHECK(server.pending_connections() <= size_t(GateLimits{}.max_pending_per_peer));
  std::string err[2];
  std::string got[2];
  std::thread ranks[2];
  for (int r = 0; r < 2; ++r)
    ranks[r] = std::thread([&, r] {
      try {
        StoreClient c("127.0.0.1", server.port(), "tok", 20.0, "job-nonce");
        std::string holder;
        if (!c.claim(strfmt("rank/%d", r), "me", &holder)) throw Error("rank taken");
        c.set(strfmt("addr/%d", r), strfmt("address of rank %d", r));
        got[r] = c.get(strfmt("addr/%d", 1 - r));
      } catch (const std::exception& e) {
        err[r] = e.what();
      }
    });
  for (auto& t : ranks) t.join();
  for (int r = 0; r < 2; ++r) {
    INFO(err[r]);
    CHECK(err[r].empty());
    CHECK(got[r] == strfmt("address of rank %d", 1 - r));
  }
}

TEST_CASE("store: a stranger who keeps opening connections as fast as it can does not keep a rank out") {
  StoreServer server("127.0.0.1", 0, "tok");
  std::atomic<bool> stop{false};
  std::atomic<size_t> opened{0};
  std::thread stranger([&] {
    std::vector<Socket> held;
    while (!stop) {
      try {
        held.push_back(Socket::connect_to("127.0.0.1", server.port(), now_s() + 1, "stranger"));
        opened++;
      } catch (...) {
      }
      if (held.size() > 400) held.erase(held.begin(), held.begin() + 200);  // its own fd budget
    }
  });
  REQUIRE(wait_until([&] { return opened.load() > 500; }, 20));
  const double t0 = now_s();
  std::string err;
  try {
    StoreClient c("127.0.0.1", server.port(), "tok", 60.0);
    c.set("k", "v");
    CHECK(c.get("k") == "v");
  } catch (const std::exception& e) {
    err = e.what();
  }
  const double took = now_s() - t0;
  stop = true;
  stranger.join();
  INFO(err);
  CHECK(err.empty());
  WARN(strfmt("a rank got in after %.2f s while a stranger opened %zu connections", took, opened.load()));
}

TEST_CASE("store: a stranger on another address cannot take the room of this address's ranks") {
  GateLimits limits;
  limits.max_pending = 40;
  limits.max_pending_per_peer = 16;
  limits.handshake_s = 60;
  StoreServer server("127.0.0.1", 0, "tok", "", limits);
  std::vector<Socket> ours, theirs;
  for (int i = 0; i < 5; ++i) ours.push_back(idle_from("127.0.0.1", server.port()));
  REQUIRE(wait_until([&] { return server.pending_from("127.0.0.1") == 5; }, 5));
  for (int i = 0; i < 200; ++i) theirs.push_back(idle_from("127.0.0.2", server.port()));
  REQUIRE(wait_until([&] { return server.refused() >= 200 - 16; }, 10));
  CHECK(server.pending_from("127.0.0.2") <= 16);  // per-address bound
  CHECK(server.pending_from("127.0.0.1") == 5);   // untouched by the other address's flood
  StoreClient c("127.0.0.1", server.port(), "tok", 10.0);
  c.set("k", "v");
  CHECK(c.get("k") == "v");
}

TEST_CASE("store: a connection that does not prove the token in time is closed") {
  GateLimits limits;
  limits.handshake_s = 0.5;
  StoreServer server("127.0.0.1", 0, "tok", "", limits);
  Socket s = Socket::connect_to("127.0.0.1", server.port(), now_s() + 5, "test");
  const double t0 = now_s();
  char ch;
  CHECK_THROWS_AS(s.read_all(&ch, 1, now_s() + 10), SocketClosed);
  CHECK(now_s() - t0 < 5);
  CHECK(wait_until([&] { return server.refused() == 1; }, 5));
}

TEST_CASE("store: a loopback store listens on 127.0.0.1 only, not on every interface") {
  StoreServer server("127.0.0.1", 0, "tok");
  std::ifstream f("/proc/net/tcp");
  std::string line, want = strfmt(":%04X", server.port());
  bool found = false;
  while (std::getline(f, line)) {
    std::istringstream in(line);
    std::string sl, local, remote, state;
    in >> sl >> local >> remote >> state;
    if (state != "0A" || local.size() < 5 || local.substr(local.size() - 5) != want) continue;  // 0A: LISTEN
    found = true;
    CHECK(local.substr(0, 8) == "0100007F");  // 127.0.0.1, not 00000000
  }
  CHECK(found);
}

TEST_CASE("store: a rank of another job (its nonce differs) and a duplicate rank are refused") {
  StoreServer server("127.0.0.1", 0, "tok", "nonce-of-job-a");
  StoreClient a("127.0.0.1", server.port(), "tok", 5.0, "nonce-of-job-a");
  REQUIRE_THROWS_WITH(StoreClient("127.0.0.1", server.port(), "tok", 5.0, "nonce-of-job-b"),
                      Catch::Contains("refused this rank") && Catch::Contains("another job"));
  std::string holder;
  CHECK(a.claim("rank/1", "pid 1", &holder));
  StoreClient b("127.0.0.1", server.port(), "tok", 5.0, "nonce-of-job-a");
  CHECK_FALSE(b.claim("rank/1", "pid 2", &holder));
  CHECK(holder == "pid 1");
}

TEST_CASE("store: request parsing refuses every malformed frame") {
  CHECK(parse_store_request("").op == 0);
  CHECK(parse_store_request("S").op == 0);
  CHECK(parse_store_request(std::string("S\xff\xff\xff\xff", 5)).op == 0);  // key longer than the frame
  CHECK(parse_store_request(std::string("G\x01\0\0\0k\x01\0", 8)).op == 0);  // short wait field
  CHECK(parse_store_request(std::string("Q\0\0\0\0", 5)).op == 0);
  StoreRequest r = parse_store_request(std::string("C\x01\0\0\0kv", 7));
  CHECK(r.op == 'C');
  CHECK(r.key == "k");
  CHECK(r.value == "v");
}

// --- the ranks' agreement at the rendezvous (comm/rendezvous/agreement.h, issue 40) --------

namespace {

// Runs agree_at_rendezvous for each rank on its own thread against one store; returns each
// rank's error ("" when it agreed) and how long the slowest took.
std::vector<std::string> agree_threads(const std::vector<RankSettings>& ranks, double* seconds = nullptr) {
  StoreServer server(0, "tok");
  std::vector<std::string> errors(ranks.size());
  std::vector<std::thread> threads;
  const double t0 = now_s();
  for (size_t r = 0; r < ranks.size(); ++r)
    threads.emplace_back([&, r] {
      try {
        StoreClient c("127.0.0.1", server.port(), "tok", 60.0);
        agree_at_rendezvous(c, static_cast<int>(r), ranks[r], 60.0);
      } catch (const Error& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  if (seconds != nullptr) *seconds = now_s() - t0;
  return errors;
}

}  // namespace

TEST_CASE("agreement: settings encode and decode exactly, and malformed text is refused") {
  const RankSettings s{3, {{"--lr", "0.0006"}, {"--odd", "tab\there\nnewline\\back"}, {"--empty", ""}}};
  const auto back = decode_rank_settings(encode_rank_settings(s));
  REQUIRE(back.has_value());
  CHECK(back->world == 3);
  CHECK(back->settings == s.settings);
  for (const char* bad : {"", "ringzero-settings 1\n", "ringzero-settings 2\nworld 2\n", "ringzero-settings 1\nworld 0\n",
                          "ringzero-settings 1\nworld 2\n--lr 0.1\n", "ringzero-settings 1\nworld 2\n--lr\t\\x\n",
                          "ringzero-settings 1\nworld 2\n--lr\t1", "ringzero-settings 1\nworld 99999999\n",
                          // a setting named twice would compare as whichever copy is found
                          "ringzero-settings 1\nworld 2\n--lr\t0.1\n--seed\t1\n--lr\t0.2\n"})
    CHECK(!decode_rank_settings(bad).has_value());
}

TEST_CASE("agreement: the first difference is one line naming the key, the ranks and both values") {
  const RankSettings zero{2, {{"--lr", "0.0006"}, {"--data", "a.bin (10 bytes, head 01); b.bin (20 bytes, head 02)"}}};
  RankSettings one = zero;
  CHECK(settings_difference(1, one, zero).empty());
  one.settings[0].second = "0.5";
  CHECK(settings_difference(1, one, zero) ==
        "rank 1's --lr 0.5 differs from rank 0's 0.0006; every rank of a job must be given the same --lr");
  one = zero;
  one.settings[1].second = "a.bin (10 bytes, head 01); b.bin (21 bytes, head 03)";
  CHECK(settings_difference(1, one, zero).find("item 2 is b.bin (21 bytes, head 03) on rank 1, b.bin (20 bytes, head "
                                               "02) on rank 0") != std::string::npos);
  one.world = 3;
  CHECK(settings_difference(1, one, zero).rfind("rank 1 was started with WORLD_SIZE 3, rank 0 with 2", 0) == 0);
  one = zero;
  one.settings[0].second = "\x1b]0;title\x07";  // a terminal escape is shown escaped
  CHECK(settings_difference(1, one, zero).find("\\x1b]0;title\\x07") != std::string::npos);
}

TEST_CASE("agreement: at the store every rank stops within seconds on a difference, from either side") {
  const RankSettings a{3, {{"--seed", "1337"}}};
  RankSettings b = a;
  b.settings[0].second = "7";
  SECTION("ranks that agree pass") {
    for (const std::string& e : agree_threads({a, a, a})) CHECK(e.empty());
  }
  SECTION("rank 2 differs: all three ranks fail with its line") {
    double s = 0;
    for (const std::string& e : agree_threads({a, a, b}, &s)) CHECK(e == settings_difference(2, b, a));
    CHECK(s < 20.0);
  }
  SECTION("a rank beyond rank 0's world size names the difference itself") {
    // Rank 0 and 1 of a job of 2, and a rank 2 started for 3: the job of 2 is whole and goes
    // on; rank 2 reads rank 0's settings and fails at once.
    const RankSettings two{2, {{"--seed", "1337"}}};
    StoreServer server(0, "tok");
    std::string errors[3];
    std::vector<std::thread> threads;
    for (int r = 0; r < 3; ++r)
      threads.emplace_back([&, r] {
        try {
          StoreClient c("127.0.0.1", server.port(), "tok", 60.0);
          agree_at_rendezvous(c, r, r < 2 ? two : a, 60.0);
        } catch (const Error& e) {
          errors[r] = e.what();
        }
      });
    for (auto& t : threads) t.join();
    CHECK(errors[0].empty());
    CHECK(errors[1].empty());
    CHECK(errors[2].rfind("rank 2 was started with WORLD_SIZE 3, rank 0 with 2", 0) == 0);
  }
}

TEST_CASE("agreement: through a communicator (--comm mpi) the same line reaches every rank") {
  const SettingsToAgree zero = {{"--lr", "0.0006"}, {"--strategy", "zero2"}};
  SettingsToAgree other = zero;
  other[1].second = "zero1";
  auto comms = make_thread_communicators(3, CommOptions{});
  std::string errors[3];
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r)
    threads.emplace_back([&, r] {
      try {
        agree_by_collective(*comms[r], r == 1 ? other : zero);
      } catch (const Error& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (const std::string& e : errors)
    CHECK(e == "rank 1's --strategy zero1 differs from rank 0's zero2; every rank of a job must be given the same "
               "--strategy");
  // And ranks that agree pass without a second gather.
  auto same = make_thread_communicators(2, CommOptions{});
  std::thread t1([&] { agree_by_collective(*same[1], zero); });
  agree_by_collective(*same[0], zero);
  t1.join();
}
