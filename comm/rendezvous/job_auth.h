// comm/rendezvous/job_auth.h: proving the job token without sending it.
//
// Every connection between the processes of a job (a rank to rank 0's rendezvous store, a
// tcp ring neighbour to the next) opens with a challenge-response in which each side
// proves it knows RINGZERO_JOB_TOKEN and neither sends it. Frames are [u32 length][bytes]
// (Socket::write_frame), at most kHandshakeMaxFrame bytes each during the handshake:
//
//   client -> server  hello      "RZHI" u32 protocol, Nc (32 fresh random bytes), claim
//   server -> client  challenge  "RZCH" u32 protocol, Ns (32 fresh random bytes)
//                     or "NO <why>" (refused: final) or "BUSY <why>" (try again)
//   client -> server  proof      "RZPF" HMAC-SHA256(token, transcript("client"))
//   server -> client  welcome    "RZOK" HMAC-SHA256(token, transcript("server"))
//                     or "NO <why>" (a wrong token, another job)
//   transcript(role) = "ringzero/<protocol> <purpose> <role>" 0x00 Nc Ns u32 |claim| claim
//
// Each proof covers both sides' fresh nonces, so a recorded exchange proves nothing in a
// new one (the other side's nonce differs), and an impostor that answers on the port
// learns an HMAC of a nonce it chose, never the token; the client checks the server's
// proof before it trusts a single reply. The server proves itself only to a client that
// proved itself first. The claim is what the client says it is, in clear but covered by
// both proofs: the store's job nonce, or the tcp transport's "rank r". `purpose` ("store",
// "tcp") keeps a proof for one door from opening another.
//
// kProtocol changes whenever any message between ranks changes (these frames, store
// requests, tcp messages, shm and cuda records), so two ringzero builds that cannot work
// together say so at the hello: the server answers "NO" naming both protocol numbers, and
// a client that gets no answer at all names the older protocol as the likely cause.
// Protocol 1 (ringzero before this handshake) opened with "RZ1 <token>" in clear; a server
// recognises that hello and refuses it without logging the token.
//
// What this does not do: encrypt or sign the traffic after the handshake. Someone who can
// write into the network between the hosts of a multi-node job could still alter it; run
// such jobs on a private network (NCCL and torchrun's store assume the same).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace rz {

constexpr uint32_t kProtocol = 2;
constexpr size_t kNonceBytes = 32;
constexpr size_t kMacBytes = 32;          // HMAC-SHA256
constexpr size_t kHandshakeMaxFrame = 4096;
constexpr size_t kMaxClaimBytes = 1024;

// OpenSSL's libcrypto: n bytes from its CSPRNG; HMAC-SHA256; a constant-time comparison.
std::string random_bytes(size_t n);
std::string hmac_sha256(std::string_view key, std::string_view message);
bool same_bytes(std::string_view a, std::string_view b);

// HMAC(token, transcript(role)): role is "client" or "server".
std::string job_proof(std::string_view token, std::string_view purpose, std::string_view role,
                      std::string_view client_nonce, std::string_view server_nonce, std::string_view claim);

// A hello frame split: ok false when it is not one (legacy: protocol 1's "RZ1 ..." hello).
struct Hello {
  bool ok = false;
  bool legacy = false;
  uint32_t protocol = 0;
  std::string client_nonce, claim;
};
Hello parse_hello(std::string_view frame);
std::string make_hello(uint32_t protocol, std::string_view client_nonce, std::string_view claim);

enum class Verdict {
  kContinue,  // send the reply (if any) and read the next frame
  kAdmitted,  // send the reply: the other side proved the token
  kBusy,      // (client) the server is full of unproven connections: try again shortly
  kRefused,   // send the reply (if any), then close; why() says what happened
};

// The server's side, one frame at a time (no I/O: the gate reads and writes). check_claim
// runs once the client proved the token, before the welcome: "" admits, anything else is
// the text of the NO that refuses it (e.g. a rank of another job).
class ServerHandshake {
 public:
  using CheckClaim = std::function<std::string(const std::string& claim)>;
  ServerHandshake(std::string token, std::string purpose, std::string server_nonce, CheckClaim check_claim);
  Verdict on_frame(std::string_view frame, std::string& reply);
  const std::string& claim() const { return claim_; }
  const std::string& why() const { return why_; }  // for the server's log, when refused

 private:
  Verdict refuse(std::string why, std::string reply_text, std::string& reply);
  std::string token_, purpose_, server_nonce_, client_nonce_, claim_, why_;
  CheckClaim check_claim_;
  int step_ = 0;  // 0: waiting for the hello, 1: for the proof, 2: done
};

// The client's side: hello() first, then each frame the server sends.
class ClientHandshake {
 public:
  ClientHandshake(std::string token, std::string purpose, std::string claim, std::string client_nonce);
  std::string hello() const;
  Verdict on_frame(std::string_view frame, std::string& reply);
  // What the server did, worded to follow "the store at HOST:PORT " (e.g. "refused this
  // rank: wrong RINGZERO_JOB_TOKEN ...").
  const std::string& why() const { return why_; }

 private:
  Verdict refuse(std::string why);
  std::string token_, purpose_, claim_, client_nonce_, server_nonce_, why_;
  int step_ = 0;  // 0: waiting for the challenge, 1: for the welcome, 2: done
};

class Socket;
// Connects to host:port and proves the token (retrying while the server is busy, or not
// yet listening, until deadline). Throws one line starting with `what` (e.g.
// "rendezvous: the store at 10.0.0.1:29500") that says what the other side did.
Socket connect_with_proof(const std::string& host, int port, const std::string& token, const std::string& purpose,
                          const std::string& claim, double deadline, const std::string& what);

// 32 hex characters from /dev/urandom: a job token, a job nonce, a unique name.
std::string random_job_token();

}  // namespace rz
