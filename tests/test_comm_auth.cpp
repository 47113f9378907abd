// The job token's challenge-response (comm/rendezvous/job_auth.h): both sides prove the token and
// neither sends it. Tried here: a listener pretending to be rank 0 (it never sees the
// token, and what it captures opens nothing), a recorded exchange replayed to either side,
// a wrong token, ranks of other protocol versions (each gets a clear error at once, not a
// hang), and malformed handshake frames.
#include <catch2/catch.hpp>

#include <poll.h>
#include <sys/socket.h>

#include <functional>
#include <thread>

#include "base/check.h"
#include "comm/rendezvous/job_auth.h"
#include "comm/rendezvous/socket.h"
#include "comm/rendezvous/store.h"

using namespace rz;

namespace {

const std::string kToken = "supersecret-token";

// A listener that is not ringzero's store: accepts one connection and runs act on it,
// keeping every byte the client sent in `heard`.
struct FakePeer {
  Socket listener = Socket::listen_on(0, "fake peer", "127.0.0.1");
  int port = listener.local_port();
  std::string heard;
  std::thread thread;
  explicit FakePeer(std::function<void(Socket&, FakePeer&)> act) {
    thread = std::thread([this, act] {
      std::string peer;
      Socket c = listener.accept_until(now_s() + 20, &peer);
      if (!c.valid()) return;
      try {
        act(c, *this);
      } catch (...) {
      }
    });
  }
  void join() {
    if (thread.joinable()) thread.join();
  }
  std::string read(Socket& c) {  // one frame, recorded
    std::string f;
    if (!c.read_frame(f, 1 << 20, now_s() + 10)) return "";
    heard += f;
    return f;
  }
  ~FakePeer() { join(); }
};

std::string u32le(uint32_t v) {
  std::string s;
  for (int i = 0; i < 4; ++i) s += static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

std::vector<std::string> split_frames(const std::string& bytes) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos + 4 <= bytes.size()) {
    const uint32_t n = uint32_t(uint8_t(bytes[pos])) | uint32_t(uint8_t(bytes[pos + 1])) << 8 |
                       uint32_t(uint8_t(bytes[pos + 2])) << 16 | uint32_t(uint8_t(bytes[pos + 3])) << 24;
    if (pos + 4 + n > bytes.size()) break;
    out.push_back(bytes.substr(pos + 4, n));
    pos += 4 + n;
  }
  return out;
}

// Forwards one connection to the store at target_port, recording both directions.
struct Relay {
  Socket listener = Socket::listen_on(0, "relay", "127.0.0.1");
  int port = listener.local_port();
  std::string up, down;  // client -> store, store -> client
  std::thread thread;
  explicit Relay(int target_port) {
    thread = std::thread([this, target_port] {
      std::string peer;
      Socket c = listener.accept_until(now_s() + 20, &peer);
      if (!c.valid()) return;
      Socket s = Socket::connect_to("127.0.0.1", target_port, now_s() + 10, "relay");
      const double end = now_s() + 20;
      char buf[4096];
      while (now_s() < end) {
        pollfd p[2] = {{c.fd(), POLLIN, 0}, {s.fd(), POLLIN, 0}};
        if (::poll(p, 2, 100) <= 0) continue;
        for (int i = 0; i < 2; ++i) {
          if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
          const ssize_t n = ::recv(p[i].fd, buf, sizeof buf, 0);
          if (n <= 0) return;
          (i == 0 ? up : down).append(buf, size_t(n));
          (i == 0 ? s : c).write_all(buf, size_t(n), now_s() + 5);
        }
      }
    });
  }
  void join() {
    if (thread.joinable()) thread.join();
  }
  ~Relay() { join(); }
};

// Runs f, which must throw; returns its message and checks it came without waiting long.
std::string error_of(const std::function<void()>& f, double max_s = 8.0) {
  const double t0 = now_s();
  try {
    f();
  } catch (const std::exception& e) {
    CHECK(now_s() - t0 < max_s);
    return e.what();
  }
  FAIL("no error");
  return "";
}

}  // namespace

TEST_CASE("handshake: each side proves the token to the other, in memory") {
  ServerHandshake server(kToken, "store", random_bytes(kNonceBytes), [](const std::string& claim) {
    return claim == "job-nonce-1" ? std::string() : std::string("wrong claim");
  });
  ClientHandshake client(kToken, "store", "job-nonce-1", random_bytes(kNonceBytes));
  std::string challenge, proof, welcome, done;
  REQUIRE(server.on_frame(client.hello(), challenge) == Verdict::kContinue);
  REQUIRE(client.on_frame(challenge, proof) == Verdict::kContinue);
  REQUIRE(server.on_frame(proof, welcome) == Verdict::kAdmitted);
  CHECK(server.claim() == "job-nonce-1");
  REQUIRE(client.on_frame(welcome, done) == Verdict::kAdmitted);
  for (const std::string* f : {&challenge, &proof, &welcome}) CHECK(f->find(kToken) == std::string::npos);
  const std::string hello = client.hello();
  CHECK(hello.find(kToken) == std::string::npos);

  // The same exchange with another purpose (the tcp transport's door) does not verify.
  ServerHandshake tcp(kToken, "tcp", random_bytes(kNonceBytes), nullptr);
  ClientHandshake store_client(kToken, "store", "", random_bytes(kNonceBytes));
  std::string c2, p2, w2;
  REQUIRE(tcp.on_frame(store_client.hello(), c2) == Verdict::kContinue);
  REQUIRE(store_client.on_frame(c2, p2) == Verdict::kContinue);
  CHECK(tcp.on_frame(p2, w2) == Verdict::kRefused);
}

TEST_CASE("handshake: a wrong token is refused at the first proof, with a message that says so") {
  StoreServer server(0, kToken);
  const std::string e = error_of([&] { StoreClient("127.0.0.1", server.port(), "another-token", 10.0); });
  CHECK_THAT(e, Catch::Contains("refused this rank") && Catch::Contains("wrong RINGZERO_JOB_TOKEN"));
  StoreClient good("127.0.0.1", server.port(), kToken, 10.0);
  good.set("k", "v");
  CHECK(good.get("k") == "v");
}

TEST_CASE("handshake: a listener pretending to be rank 0 never receives the token, and its capture opens nothing") {
  std::string hello, proof;
  {
    FakePeer fake([&](Socket& c, FakePeer& self) {
      hello = self.read(c);
      c.write_frame("RZCH" + u32le(kProtocol) + std::string(kNonceBytes, 'n'), now_s() + 5);  // a nonce it chose
      proof = self.read(c);
      c.write_frame("RZOK" + std::string(kMacBytes, 'm'), now_s() + 5);  // it cannot prove the token
    });
    const std::string e = error_of([&] { StoreClient("127.0.0.1", fake.port, kToken, 10.0, "nonce-a"); });
    CHECK_THAT(e, Catch::Contains("does not know the job token") && Catch::Contains("token was not sent"));
    fake.join();
    CHECK(fake.heard.find(kToken) == std::string::npos);
    CHECK(fake.heard.find("secret") == std::string::npos);
  }
  REQUIRE(!hello.empty());
  REQUIRE(proof.size() == 4 + kMacBytes);
  // What it captured, played to the real store: the store's fresh nonce makes the proof stale.
  StoreServer server(0, kToken);
  Socket s = Socket::connect_to("127.0.0.1", server.port(), now_s() + 5, "test");
  REQUIRE(s.write_frame(hello, now_s() + 5));
  std::string challenge, answer;
  REQUIRE(s.read_frame(challenge, 4096, now_s() + 5));
  CHECK(challenge.rfind("RZCH", 0) == 0);
  REQUIRE(s.write_frame(proof, now_s() + 5));
  REQUIRE(s.read_frame(answer, 4096, now_s() + 5));
  CHECK_THAT(answer, Catch::StartsWith("NO wrong RINGZERO_JOB_TOKEN"));
}

TEST_CASE("handshake: a recorded exchange, replayed to the store or to a rank, fails") {
  StoreServer server(0, kToken);
  std::vector<std::string> up, down;
  {
    Relay relay(server.port());
    {
      StoreClient c("127.0.0.1", relay.port, kToken, 10.0, "nonce-a");
      c.set("through", "the relay");
      CHECK(c.get("through") == "the relay");
    }
    relay.join();
    CHECK(relay.up.find(kToken) == std::string::npos);
    CHECK(relay.down.find(kToken) == std::string::npos);
    up = split_frames(relay.up);
    down = split_frames(relay.down);
  }
  REQUIRE(up.size() >= 2);    // hello, proof, requests
  REQUIRE(down.size() >= 2);  // challenge, welcome, replies
  {  // as a client, to the store
    Socket s = Socket::connect_to("127.0.0.1", server.port(), now_s() + 5, "test");
    std::string challenge, answer;
    REQUIRE(s.write_frame(up[0], now_s() + 5));
    REQUIRE(s.read_frame(challenge, 4096, now_s() + 5));
    CHECK(challenge != down[0]);  // a fresh nonce
    REQUIRE(s.write_frame(up[1], now_s() + 5));
    REQUIRE(s.read_frame(answer, 4096, now_s() + 5));
    CHECK_THAT(answer, Catch::StartsWith("NO wrong RINGZERO_JOB_TOKEN"));
  }
  {  // as the store, to a rank
    FakePeer fake([&](Socket& c, FakePeer& self) {
      self.read(c);
      c.write_frame(down[0], now_s() + 5);
      self.read(c);
      c.write_frame(down[1], now_s() + 5);
    });
    const std::string e = error_of([&] { StoreClient("127.0.0.1", fake.port, kToken, 10.0, "nonce-a"); });
    CHECK_THAT(e, Catch::Contains("does not know the job token"));
  }
}

TEST_CASE("handshake: ranks of other protocol versions get a clear error at once, not a hang") {
  StoreServer server(0, kToken);
  auto answer_to = [&](const std::string& hello) {
    Socket s = Socket::connect_to("127.0.0.1", server.port(), now_s() + 5, "test");
    REQUIRE(s.write_frame(hello, now_s() + 5));
    std::string answer;
    REQUIRE(s.read_frame(answer, 4096, now_s() + 5));
    return answer;
  };
  // A newer rank (protocol 3) and an older one (protocol 1, which sent the token in clear).
  CHECK_THAT(answer_to(make_hello(3, random_bytes(kNonceBytes), "")),
             Catch::StartsWith("NO ") && Catch::Contains("protocol 3") && Catch::Contains("protocol 2") &&
                 Catch::Contains("same ringzero build"));
  const std::string old = answer_to("RZ1 " + kToken);
  CHECK_THAT(old, Catch::StartsWith("NO ") && Catch::Contains("protocol 1") && Catch::Contains("same ringzero build"));
  CHECK(old.find(kToken) == std::string::npos);

  // This rank against an older store (protocol 1 hung up on a hello it could not read)...
  {
    FakePeer v1([](Socket& c, FakePeer& self) { self.read(c); });
    CHECK_THAT(error_of([&] { StoreClient("127.0.0.1", v1.port, kToken, 30.0); }),
               Catch::Contains("hung up on the hello") && Catch::Contains("rendezvous protocol 1"));
  }
  // ... and against a newer one that answers with its own protocol number.
  {
    FakePeer v3([](Socket& c, FakePeer& self) {
      self.read(c);
      c.write_frame("RZCH" + u32le(3) + std::string(kNonceBytes, 'x'), now_s() + 5);
      self.read(c);
    });
    CHECK_THAT(error_of([&] { StoreClient("127.0.0.1", v3.port, kToken, 30.0); }),
               Catch::Contains("speaks ringzero protocol 3") && Catch::Contains("this rank protocol 2"));
  }
  // Something that is not ringzero at all.
  {
    FakePeer http([](Socket& c, FakePeer& self) {
      self.read(c);
      const std::string reply = "HTTP/1.0 400 Bad Request\r\n\r\n";
      c.write_all(reply.data(), reply.size(), now_s() + 5);
    });
    CHECK_THAT(error_of([&] { StoreClient("127.0.0.1", http.port, kToken, 30.0); }),
               Catch::Contains("rendezvous: the store at 127.0.0.1:") &&
                   (Catch::Contains("not ringzero") || Catch::Contains("more than a handshake frame")));
  }
}

TEST_CASE("handshake: malformed frames are refused, never trusted") {
  auto server = [] { return ServerHandshake(kToken, "store", random_bytes(kNonceBytes), nullptr); };
  std::string reply;
  for (const std::string& bad : {std::string(), std::string("RZHI"), "RZHI" + u32le(2) + std::string(31, 'n'),
                                 "RZHI" + u32le(2) + std::string(kNonceBytes + kMaxClaimBytes + 1, 'n'),
                                 std::string("GET / HTTP/1.0\r\n\r\n")}) {
    ServerHandshake s = server();
    CHECK(s.on_frame(bad, reply) == Verdict::kRefused);
    CHECK(reply.empty());  // not a ringzero rank: nothing said
  }
  {  // a proof of the wrong size, a proof that is a hello
    ServerHandshake s = server();
    ClientHandshake c(kToken, "store", "", random_bytes(kNonceBytes));
    REQUIRE(s.on_frame(c.hello(), reply) == Verdict::kContinue);
    CHECK(s.on_frame("RZPF" + std::string(31, 'p'), reply) == Verdict::kRefused);
  }
  {  // a client: a welcome before the challenge, a challenge of the wrong size, a BUSY
    ClientHandshake c(kToken, "store", "", random_bytes(kNonceBytes));
    CHECK(c.on_frame("RZOK" + std::string(kMacBytes, 'm'), reply) == Verdict::kRefused);
    ClientHandshake c2(kToken, "store", "", random_bytes(kNonceBytes));
    CHECK(c2.on_frame("RZCH" + u32le(2), reply) == Verdict::kRefused);
    ClientHandshake c3(kToken, "store", "", random_bytes(kNonceBytes));
    CHECK(c3.on_frame("BUSY full", reply) == Verdict::kBusy);
    ClientHandshake c4(kToken, "store", "", random_bytes(kNonceBytes));
    CHECK(c4.on_frame(std::string("NO \x1b[2Jbad\nline", 15), reply) == Verdict::kRefused);
    CHECK(c4.why().find('\x1b') == std::string::npos);  // the peer's words, made printable
    CHECK(c4.why().find('\n') == std::string::npos);
  }
  // HMAC-SHA256 itself (RFC 4231, test case 2).
  const std::string mac = hmac_sha256("Jefe", "what do ya want for nothing?");
  std::string hex;
  for (unsigned char b : mac) hex += strfmt("%02x", b);
  CHECK(hex == "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  CHECK(random_bytes(kNonceBytes) != random_bytes(kNonceBytes));
}
