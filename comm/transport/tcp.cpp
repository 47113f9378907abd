// comm/transport/tcp.cpp: ranks as processes on any hosts, over TCP.
//
// One connection per ring edge: this rank connects to its right neighbour and accepts
// its left one. Both ends prove the job token without sending it (comm/rendezvous/job_auth.h, claim
// "rank r"), and the listener is a Gate (comm/rendezvous/gate.h), so a stranger on the port can
// neither get in nor keep the left neighbour out. It listens on the address the store sees
// this rank at (127.0.0.1 for a loopback job), never on every interface. A message on the wire
// is [MsgHeader][bytes]. A reader thread drains the left connection into a private
// SlotRing inbox, so the ring sees the same "reduce from the slot in place" channel as
// with shm, and a rank that is busy sending never stops draining its left neighbour
// (two ranks both blocked in send() on full socket buffers cannot happen). EOF or
// ECONNRESET from the left closes the inbox: the next recv fails at once with "peer rank
// P closed the channel". A killed process closes its sockets, so death is detected the
// same way.
#include <sys/socket.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <thread>

#include "comm/rendezvous/gate.h"
#include "comm/rendezvous/job_auth.h"
#include "comm/transport/transports.h"

namespace rz {
namespace {

struct MsgHeader {
  uint32_t magic;
  uint32_t tag;
  uint64_t bytes;
};
constexpr uint32_t kMsgMagic = 0x525a4d47u;  // "RZMG"

class TcpChannel final : public RingChannel {
 public:
  TcpChannel(Socket to_right, Socket from_left, int rank, int nranks, const CommOptions& opts)
      : to_right_(std::move(to_right)), from_left_(std::move(from_left)),
        inbox_(kSlotsPerEdge, slot_bytes_for(opts)), timeout_s_(opts.timeout_s) {
    right_ = (rank + 1) % nranks;
    left_watch_.peer_rank = (rank - 1 + nranks) % nranks;
    left_watch_.timeout_s = opts.timeout_s;
    reader_ = std::thread([this] { read_loop(); });
  }
  ~TcpChannel() override {
    stop_ = true;
    close();
    if (reader_.joinable()) reader_.join();
  }

  void send(const void* src, size_t bytes, MsgTag tag) override {
    MsgHeader h{kMsgMagic, static_cast<uint32_t>(tag), bytes};
    double deadline = now_s() + timeout_s_;
    try {
      bool ok;
      if (bytes <= 4096) {  // one write, one packet: small messages are latency-bound
        char buf[sizeof(MsgHeader) + 4096];
        std::memcpy(buf, &h, sizeof h);
        if (bytes > 0) std::memcpy(buf + sizeof h, src, bytes);
        ok = to_right_.write_all(buf, sizeof h + bytes, deadline);
      } else {
        ok = to_right_.write_all(&h, sizeof h, deadline) && to_right_.write_all(src, bytes, deadline);
      }
      if (!ok)
        throw PeerError(right_, strfmt("timed out after %.0f s waiting for rank %d to take data", timeout_s_, right_));
    } catch (const SocketClosed&) {
      throw PeerError(right_, strfmt("peer rank %d closed the channel", right_));
    }
  }

  void recv(size_t bytes, MsgTag tag, const std::function<void(const void*)>& consume) override {
    inbox_.ring().recv(bytes, tag, consume, left_watch_);
  }

  size_t max_message_bytes() const override { return inbox_.ring().slot_bytes(); }

  void close() override {
    if (to_right_.valid()) shutdown(to_right_.fd(), SHUT_RDWR);
    if (from_left_.valid()) shutdown(from_left_.fd(), SHUT_RDWR);
    inbox_.ring().close();
  }

 private:
  void read_loop() {
    PeerWatch w;
    w.peer_rank = left_watch_.peer_rank;
    w.timeout_s = 1e9;  // waiting for our own rank to consume is not the peer's fault
    w.stop = [this] { return stop_.load(); };
    SlotRing& ring = inbox_.ring();
    try {
      while (!stop_) {
        if (!from_left_.wait_readable(now_s() + 0.1)) continue;
        MsgHeader h{};
        double deadline = now_s() + timeout_s_;
        if (!from_left_.read_all(&h, sizeof h, deadline)) break;
        if (h.magic != kMsgMagic || h.bytes > ring.slot_bytes()) {
          std::fprintf(stderr, "ringzero tcp: rank %d sent a malformed message header; closing the channel\n",
                       w.peer_rank);
          break;
        }
        void* slot = ring.acquire(w);
        if (slot == nullptr) break;
        if (h.bytes > 0 && !from_left_.read_all(slot, h.bytes, deadline)) break;
        ring.publish(h.bytes, static_cast<MsgTag>(h.tag));
      }
    } catch (...) {
      // EOF, reset, or our own close(): in every case the inbox closes below.
    }
    ring.close();
  }

  Socket to_right_, from_left_;
  HeapSlotRing inbox_;
  double timeout_s_;
  int right_ = 0;
  PeerWatch left_watch_;
  std::atomic<bool> stop_{false};
  std::thread reader_;
};

}  // namespace

std::unique_ptr<RingChannel> connect_tcp_channel(const RankEnv& env, const CommOptions& opts, StoreClient& store) {
  const int N = env.world_size, r = env.rank;
  const int right = (r + 1) % N, left = (r - 1 + N) % N;
  const std::string my_ip = store.local_ip();
  Socket listener = Socket::listen_on(0, "tcp transport", my_ip);
  const int my_port = listener.local_port();

  // The gate lets in only a connection that proved the token as rank `left`.
  const std::string want = strfmt("rank %d", left);
  auto check_claim = [&](const std::string& claim) -> std::string {
    if (claim == want) return "";
    return strfmt("this is rank %d's tcp listener, which waits for rank %d, not '%s'", r, left,
                  claim.substr(0, 40).c_str());
  };
  Gate gate(std::move(listener), env.job_token, "tcp", strfmt("ringzero tcp (rank %d)", r), GateLimits{}, check_claim,
            nullptr);
  store.set(strfmt("tcp/%d", r), strfmt("%s:%d", my_ip.c_str(), my_port));

  std::string addr = store.get(strfmt("tcp/%d", right));
  size_t colon = addr.rfind(':');
  RZ_CHECK(colon != std::string::npos, "tcp transport: rank %d published a bad address '%s'", right, addr.c_str());
  const double deadline = now_s() + opts.timeout_s;
  Socket to_right = connect_with_proof(addr.substr(0, colon), std::atoi(addr.c_str() + colon + 1), env.job_token,
                                       "tcp", strfmt("rank %d", r), deadline,
                                       strfmt("tcp transport, rank %d: rank %d at %s", r, right, addr.c_str()));
  Socket from_left = gate.next_admitted(deadline);
  RZ_CHECK(from_left.valid(), "tcp transport, rank %d: rank %d did not connect within %.0f s", r, left, opts.timeout_s);
  return std::make_unique<TcpChannel>(std::move(to_right), std::move(from_left), r, N, opts);
}

}  // namespace rz
