// comm/rendezvous/job_auth.cpp: the job token's challenge-response (protocol in job_auth.h), over
// OpenSSL's libcrypto.
#include "comm/rendezvous/job_auth.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "base/check.h"
#include "base/printable.h"
#include "comm/rendezvous/socket.h"

namespace rz {
namespace {

constexpr std::string_view kHelloTag = "RZHI", kChallengeTag = "RZCH", kProofTag = "RZPF", kWelcomeTag = "RZOK";
constexpr std::string_view kLegacyHello = "RZ1 ";
constexpr std::string_view kNo = "NO ", kBusy = "BUSY ";

void put_u32(std::string& s, uint32_t v) {
  for (int i = 0; i < 4; ++i) s += static_cast<char>((v >> (8 * i)) & 0xff);  // little-endian on any host
}
uint32_t get_u32(std::string_view s, size_t pos) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t(static_cast<unsigned char>(s[pos + i])) << (8 * i);
  return v;
}
bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

// What the other side wrote, fit for one line of our own error: escaped (base/printable.h), bounded.
std::string peer_text(std::string_view s) {
  const std::string out = printable(s.substr(0, 300));
  return s.size() > 300 ? out + "..." : out;
}

const char* door_name(const std::string& purpose) {
  return purpose == "store" ? "store (rank 0)" : purpose == "tcp" ? "tcp ring neighbour" : "peer";
}

}  // namespace

std::string random_bytes(size_t n) {
  std::string out(n, '\0');
  RZ_CHECK(RAND_bytes(reinterpret_cast<unsigned char*>(out.data()), static_cast<int>(n)) == 1,
           "job token handshake: OpenSSL's RAND_bytes failed (no entropy source?)");
  return out;
}

std::string hmac_sha256(std::string_view key, std::string_view message) {
  static const unsigned char kEmpty = 0;  // HMAC() reads a null key as "reuse the last one"
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  const void* k = key.empty() ? static_cast<const void*>(&kEmpty) : key.data();
  RZ_CHECK(HMAC(EVP_sha256(), k, static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(message.data()),
                message.size(), out, &n) != nullptr &&
               n == kMacBytes,
           "job token handshake: OpenSSL's HMAC-SHA256 failed");
  return std::string(reinterpret_cast<const char*>(out), n);
}

bool same_bytes(std::string_view a, std::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string job_proof(std::string_view token, std::string_view purpose, std::string_view role,
                      std::string_view client_nonce, std::string_view server_nonce, std::string_view claim) {
  std::string t = strfmt("ringzero/%u ", kProtocol);
  t.append(purpose).append(" ").append(role);
  t += '\0';
  t.append(client_nonce).append(server_nonce);
  put_u32(t, static_cast<uint32_t>(claim.size()));
  t.append(claim);
  return hmac_sha256(token, t);
}

std::string make_hello(uint32_t protocol, std::string_view client_nonce, std::string_view claim) {
  std::string h(kHelloTag);
  put_u32(h, protocol);
  h.append(client_nonce).append(claim);
  return h;
}

Hello parse_hello(std::string_view frame) {
  Hello h;
  if (starts_with(frame, kLegacyHello)) {
    h.legacy = true;
    h.protocol = 1;
    return h;
  }
  const size_t fixed = kHelloTag.size() + 4 + kNonceBytes;
  if (!starts_with(frame, kHelloTag) || frame.size() < fixed || frame.size() - fixed > kMaxClaimBytes) return h;
  h.protocol = get_u32(frame, kHelloTag.size());
  h.client_nonce = std::string(frame.substr(kHelloTag.size() + 4, kNonceBytes));
  h.claim = std::string(frame.substr(fixed));
  h.ok = true;
  return h;
}

ServerHandshake::ServerHandshake(std::string token, std::string purpose, std::string server_nonce,
                                 CheckClaim check_claim)
    : token_(std::move(token)), purpose_(std::move(purpose)), server_nonce_(std::move(server_nonce)),
      check_claim_(std::move(check_claim)) {}

Verdict ServerHandshake::refuse(std::string why, std::string reply_text, std::string& reply) {
  why_ = std::move(why);
  reply = reply_text.empty() ? std::string() : std::string(kNo) + reply_text;
  step_ = 2;
  return Verdict::kRefused;
}

Verdict ServerHandshake::on_frame(std::string_view frame, std::string& reply) {
  reply.clear();
  if (step_ == 0) {
    const Hello h = parse_hello(frame);
    if (h.legacy)  // its hello holds the token in clear: never echoed, never logged
      return refuse("a rank of an older ringzero (rendezvous protocol 1, which sends the job token in clear)",
                    strfmt("this rank speaks ringzero protocol 1 (an older ringzero, which sends the job token in "
                           "clear) and the %s it reached speaks protocol %u: start every rank from the same ringzero "
                           "build",
                           door_name(purpose_), kProtocol),
                    reply);
    if (!h.ok) return refuse(strfmt("a malformed hello of %zu bytes (not a ringzero rank?)", frame.size()), "", reply);
    if (h.protocol != kProtocol)
      return refuse(strfmt("a rank speaking ringzero protocol %u (this one speaks %u): another ringzero build",
                           h.protocol, kProtocol),
                    strfmt("this rank speaks ringzero protocol %u and the %s it reached speaks protocol %u: start "
                           "every rank from the same ringzero build",
                           h.protocol, door_name(purpose_), kProtocol),
                    reply);
    client_nonce_ = h.client_nonce;
    claim_ = h.claim;
    reply = std::string(kChallengeTag);
    put_u32(reply, kProtocol);
    reply += server_nonce_;
    step_ = 1;
    return Verdict::kContinue;
  }
  if (step_ == 1) {
    if (!starts_with(frame, kProofTag) || frame.size() != kProofTag.size() + kMacBytes)
      return refuse(strfmt("a malformed proof of %zu bytes", frame.size()), "", reply);
    const std::string want = job_proof(token_, purpose_, "client", client_nonce_, server_nonce_, claim_);
    if (!same_bytes(frame.substr(kProofTag.size()), want))
      return refuse("wrong job token (its proof does not match this RINGZERO_JOB_TOKEN)",
                    strfmt("wrong RINGZERO_JOB_TOKEN: this rank's proof of the job token does not match the one the "
                           "%s holds",
                           door_name(purpose_)),
                    reply);
    const std::string no = check_claim_ ? check_claim_(claim_) : std::string();
    if (!no.empty()) return refuse(no, no, reply);
    reply = std::string(kWelcomeTag) + job_proof(token_, purpose_, "server", client_nonce_, server_nonce_, claim_);
    step_ = 2;
    return Verdict::kAdmitted;
  }
  return refuse("a frame after the handshake ended", "", reply);
}

ClientHandshake::ClientHandshake(std::string token, std::string purpose, std::string claim, std::string client_nonce)
    : token_(std::move(token)), purpose_(std::move(purpose)), claim_(std::move(claim)),
      client_nonce_(std::move(client_nonce)) {}

std::string ClientHandshake::hello() const { return make_hello(kProtocol, client_nonce_, claim_); }

Verdict ClientHandshake::refuse(std::string why) {
  why_ = std::move(why);
  step_ = 2;
  return Verdict::kRefused;
}

Verdict ClientHandshake::on_frame(std::string_view frame, std::string& reply) {
  reply.clear();
  if (step_ < 2 && starts_with(frame, kNo)) return refuse("refused this rank: " + peer_text(frame.substr(kNo.size())));
  if (step_ < 2 && starts_with(frame, kBusy)) {
    why_ = "is busy: " + peer_text(frame.substr(kBusy.size()));
    step_ = 2;
    return Verdict::kBusy;
  }
  if (step_ == 0 && starts_with(frame, kChallengeTag) && frame.size() == kChallengeTag.size() + 4 + kNonceBytes) {
    const uint32_t protocol = get_u32(frame, kChallengeTag.size());
    if (protocol != kProtocol)
      return refuse(strfmt("speaks ringzero protocol %u and this rank protocol %u: start every rank from the same "
                           "ringzero build",
                           protocol, kProtocol));
    server_nonce_ = std::string(frame.substr(kChallengeTag.size() + 4));
    reply = std::string(kProofTag) + job_proof(token_, purpose_, "client", client_nonce_, server_nonce_, claim_);
    step_ = 1;
    return Verdict::kContinue;
  }
  if (step_ == 1 && starts_with(frame, kWelcomeTag) && frame.size() == kWelcomeTag.size() + kMacBytes) {
    const std::string want = job_proof(token_, purpose_, "server", client_nonce_, server_nonce_, claim_);
    if (!same_bytes(frame.substr(kWelcomeTag.size()), want))
      return refuse("does not know the job token (its proof does not match): another job, or another program, "
                    "answers there (this rank's token was not sent)");
    step_ = 2;
    return Verdict::kAdmitted;
  }
  return refuse(strfmt("answered with %zu bytes that are not ringzero's rendezvous protocol (first bytes '%s')",
                       frame.size(), peer_text(frame.substr(0, 8)).c_str()));
}

Socket connect_with_proof(const std::string& host, int port, const std::string& token, const std::string& purpose,
                          const std::string& claim, double deadline, const std::string& what) {
  double backoff_s = 0.02;
  for (;;) {
    Socket s = Socket::connect_to(host, port, deadline, what.c_str());
    const std::string nonce = random_bytes(kNonceBytes);
    ClientHandshake hs(token, purpose, claim, nonce);
    std::string frame, reply;
    bool answered = false;
    Verdict v = Verdict::kContinue;
    try {
      bool ok = s.write_frame(hs.hello(), deadline);
      while (ok) {
        ok = s.read_frame(frame, kHandshakeMaxFrame, deadline);
        if (!ok) break;
        answered = true;
        v = hs.on_frame(frame, reply);
        if (v != Verdict::kContinue) break;
        ok = s.write_frame(reply, deadline);
      }
      if (!ok) RZ_FAIL("%s did not answer the handshake before the timeout", what.c_str());
    } catch (const SocketClosed&) {
      if (answered) RZ_FAIL("%s hung up during the handshake without saying why (its log may)", what.c_str());
      RZ_FAIL("%s hung up on the hello without an answer: it runs an older ringzero (rendezvous protocol 1; start "
              "every rank from the same build), or what listens there is not ringzero",
              what.c_str());
    } catch (const FrameTooLong& e) {
      RZ_FAIL("%s answered with a frame of %zu bytes, more than a handshake frame may hold (%zu): not ringzero?",
              what.c_str(), e.bytes, kHandshakeMaxFrame);
    }
    if (v == Verdict::kAdmitted) return s;
    RZ_CHECK(v == Verdict::kBusy, "%s %s", what.c_str(), hs.why().c_str());
    if (now_s() + backoff_s >= deadline)
      RZ_FAIL("%s stayed busy until the timeout: connections that never prove the job token keep it full (is "
              "something else connecting to that port?); its last answer: %s",
              what.c_str(), hs.why().c_str());
    // Jittered, so that ranks turned away together do not come back together.
    const double jitter = 0.5 + static_cast<unsigned char>(nonce[0]) / 255.0;
    std::this_thread::sleep_for(std::chrono::duration<double>(backoff_s * jitter));
    backoff_s = std::min(backoff_s * 2, 0.5);
  }
}

std::string random_job_token() {
  unsigned char bytes[16];
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  RZ_SYSCHECK(fd, "launcher: open /dev/urandom");
  ssize_t n = read(fd, bytes, sizeof(bytes));
  close(fd);
  RZ_CHECK(n == static_cast<ssize_t>(sizeof(bytes)), "launcher: short read from /dev/urandom");
  std::string hex;
  for (unsigned char b : bytes) hex += strfmt("%02x", b);
  return hex;
}

}  // namespace rz
