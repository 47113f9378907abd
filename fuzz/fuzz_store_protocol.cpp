// Fuzz target: the rendezvous wire protocol as both ends read it (comm/rendezvous/job_auth.cpp,
// comm/rendezvous/store.cpp). The input's first byte picks the side, the rest is a stream of
// [u32 length][bytes] frames as the other end would send them:
//   even: rank 0's store reading a rank: the hello, the proof, then store requests (each
//         split and parsed as the server does);
//   odd:  a rank reading the store: the challenge, the welcome (or NO / BUSY).
// A proof or a welcome cannot be forged without the token, so a frame that is exactly
// "RZPF*" or "RZOK*" is replaced by the genuine one for the nonces so far, and the fuzzer
// reaches what lies behind them. Checked: nothing is admitted on a proof that is not the
// genuine one, replies fit a handshake frame, and what a rank says of the store's answer
// is printable (it goes into a one-line error).
#include <cstring>

#include "comm/rendezvous/job_auth.h"
#include "comm/rendezvous/store.h"
#include "fuzz/fuzz_util.h"

namespace {

const std::string kToken = "fuzz-token";
const std::string kServerNonce(rz::kNonceBytes, 's'), kClientNonce(rz::kNonceBytes, 'c');

bool printable(const std::string& s) {
  for (char c : s)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return false;
  return true;
}

void as_server(const std::vector<std::string>& frames) {
  rz::ServerHandshake hs(kToken, "store", kServerNonce,
                         [](const std::string& claim) { return claim == "other" ? "another job" : std::string(); });
  std::string client_nonce, claim, reply;
  bool admitted = false;
  for (std::string f : frames) {
    if (!admitted) {
      const rz::Hello h = rz::parse_hello(f);
      if (h.ok) {
        if (h.client_nonce.size() != rz::kNonceBytes || h.claim.size() > rz::kMaxClaimBytes) std::abort();
        client_nonce = h.client_nonce;
        claim = h.claim;
      }
      const std::string genuine =
          "RZPF" + rz::job_proof(kToken, "store", "client", client_nonce, kServerNonce, claim);
      if (f == "RZPF*") f = genuine;
      const rz::Verdict v = hs.on_frame(f, reply);
      if (reply.size() > rz::kHandshakeMaxFrame) std::abort();
      if (v == rz::Verdict::kAdmitted && f != genuine) std::abort();
      if (v == rz::Verdict::kRefused) return;
      admitted = v == rz::Verdict::kAdmitted;
      continue;
    }
    const rz::StoreRequest r = rz::parse_store_request(f);
    if (r.op == 0) return;  // the server hangs up
    if (r.key.size() + r.value.size() > f.size()) std::abort();
  }
}

void as_client(const std::vector<std::string>& frames) {
  rz::ClientHandshake hs(kToken, "store", "nonce", kClientNonce);
  std::string server_nonce, reply;
  for (std::string f : frames) {
    if (f.size() == 4 + 4 + rz::kNonceBytes && f.rfind("RZCH", 0) == 0) server_nonce = f.substr(8);
    const std::string genuine = "RZOK" + rz::job_proof(kToken, "store", "server", kClientNonce, server_nonce, "nonce");
    if (f == "RZOK*") f = genuine;
    const rz::Verdict v = hs.on_frame(f, reply);
    if (v == rz::Verdict::kAdmitted && f != genuine) std::abort();
    if (v == rz::Verdict::kContinue && reply.size() != 4 + rz::kMacBytes) std::abort();
    if (v != rz::Verdict::kContinue) {
      if (!printable(hs.why())) std::abort();
      return;
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool server_side = data[0] % 2 == 0;
  std::vector<std::string> frames;
  size_t pos = 1;
  const size_t limit = rz::kStoreMaxFrame;
  while (pos + 4 <= size) {
    const uint32_t len = uint32_t(data[pos]) | uint32_t(data[pos + 1]) << 8 | uint32_t(data[pos + 2]) << 16 |
                         uint32_t(data[pos + 3]) << 24;
    pos += 4;
    // The real reader refuses an oversized frame before reading it (FrameTooLong).
    if (len > (frames.size() < 2 ? rz::kHandshakeMaxFrame : limit) || len > size - pos) break;
    frames.emplace_back(reinterpret_cast<const char*>(data + pos), len);
    pos += len;
  }
  if (server_side) as_server(frames);
  else as_client(frames);
  return 0;
}
