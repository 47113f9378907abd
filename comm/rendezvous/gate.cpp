// comm/rendezvous/gate.cpp: proven connections in, strangers out, and never the other way round (see gate.h).
#include "comm/rendezvous/gate.h"

#include <sys/socket.h>

#include <chrono>
#include <cstdio>
#include <map>

#include "base/check.h"

namespace rz {

Gate::Gate(Socket listener, std::string token, std::string purpose, std::string log_name, GateLimits limits,
           CheckClaim check_claim, Serve serve)
    : listener_(std::move(listener)), token_(std::move(token)), purpose_(std::move(purpose)),
      log_name_(std::move(log_name)), limits_(limits), check_claim_(std::move(check_claim)), serve_(std::move(serve)) {
  port_ = listener_.local_port();
  acceptor_ = std::thread([this] { accept_loop(); });
}

Gate::~Gate() {
  stop_ = true;
  if (acceptor_.joinable()) acceptor_.join();
  {
    std::lock_guard<std::mutex> l(mu_);
    for (Conn& c : conns_)
      if (c.fd >= 0) ::shutdown(c.fd, SHUT_RDWR);  // wakes a thread blocked on it
  }
  for (Conn& c : conns_)  // the acceptor is gone: nobody changes the list any more
    if (c.thread.joinable()) c.thread.join();
}

void Gate::note(const std::string& peer, const std::string& why) {
  // The first lines, then a count at each power of ten: a flood must not become a flood of lines.
  const size_t n = ++refused_;
  bool power_of_ten = false;
  for (size_t p = 100; p <= n && !power_of_ten; p *= 10) power_of_ten = p == n;
  if (n <= 20)
    std::fprintf(stderr, "%s: refused connection from %s: %s\n", log_name_.c_str(), peer.c_str(), why.c_str());
  else if (power_of_ten)
    std::fprintf(stderr, "%s: %zu connections refused so far; the latest from %s: %s\n", log_name_.c_str(), n,
                 peer.c_str(), why.c_str());
}

size_t Gate::pending() const {
  std::lock_guard<std::mutex> l(mu_);
  size_t n = 0;
  for (const Conn& c : conns_) n += !c.admitted && !c.dropped && c.fd >= 0;
  return n;
}

size_t Gate::pending_from(const std::string& ip) const {
  std::lock_guard<std::mutex> l(mu_);
  size_t n = 0;
  for (const Conn& c : conns_) n += !c.admitted && !c.dropped && c.fd >= 0 && c.ip == ip;
  return n;
}

Socket Gate::next_admitted(double deadline) {
  std::unique_lock<std::mutex> l(mu_);
  while (admitted_.empty() && now_s() < deadline) admitted_cv_.wait_for(l, std::chrono::milliseconds(100));
  if (admitted_.empty()) return Socket();
  Socket s = std::move(admitted_.front());
  admitted_.pop_front();
  return s;
}

bool Gate::make_room(const std::string& ip, std::string& why) {
  std::map<std::string, int> per_ip;
  int total = 0;
  for (const Conn& c : conns_)
    if (!c.admitted && !c.dropped && c.fd >= 0) {
      ++per_ip[c.ip];
      ++total;
    }
  std::string victim_ip;
  if (per_ip[ip] >= limits_.max_pending_per_peer) {
    victim_ip = ip;
    why = strfmt("%d connections from %s are still proving the job token (at most %d per address)", per_ip[ip],
                 ip.c_str(), limits_.max_pending_per_peer);
  } else if (total >= limits_.max_pending) {
    for (const auto& [addr, n] : per_ip)
      if (victim_ip.empty() || n > per_ip[victim_ip]) victim_ip = addr;
    why = strfmt("%d connections are still proving the job token (at most %d; %d of them from %s)", total,
                 limits_.max_pending, per_ip[victim_ip], victim_ip.c_str());
  } else {
    return true;
  }
  const double now = now_s();
  Conn* oldest = nullptr;
  for (Conn& c : conns_)
    if (!c.admitted && !c.dropped && c.fd >= 0 && c.ip == victim_ip && now - c.accepted_s >= limits_.grace_s &&
        (oldest == nullptr || c.order < oldest->order))
      oldest = &c;
  if (oldest == nullptr) return false;  // all still in their grace: the newcomer waits its turn
  oldest->dropped = true;
  // Its thread's next read ends (EOF); it answers BUSY and closes (run below).
  ::shutdown(oldest->fd, SHUT_RD);
  note(oldest->peer, "dropped to make room: " + why);
  return true;
}

void Gate::reap_finished() {
  std::list<Conn> finished;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (auto it = conns_.begin(); it != conns_.end();) {
      auto next = std::next(it);
      if (it->done) finished.splice(finished.end(), conns_, it);
      it = next;
    }
  }
  for (Conn& c : finished) c.thread.join();
}

void Gate::accept_loop() {
  while (!stop_) {
    // Nothing may escape this thread: an exception here would terminate the process.
    try {
      reap_finished();
      std::string peer;
      Socket s = listener_.accept_until(now_s() + 0.1, &peer);
      if (!s.valid()) continue;
      accepted_++;
      std::lock_guard<std::mutex> l(mu_);
      std::string why;
      if (!make_room(peer.substr(0, peer.rfind(':')), why)) {
        note(peer, "turned away: " + why);
        try {
          s.write_frame("BUSY " + why + "; try again", now_s() + 0.1);  // fits the empty socket buffer
        } catch (...) {  // it hung up already
        }
        continue;
      }
      Conn& c = conns_.emplace_back();
      c.fd = s.fd();
      c.peer = peer;
      c.ip = peer.substr(0, peer.rfind(':'));
      c.order = next_order_++;
      c.accepted_s = now_s();
      c.server_nonce = random_bytes(kNonceBytes);
      live_++;
      try {
        c.thread = std::thread([this, conn = &c, s = std::move(s)]() mutable { run(conn, std::move(s)); });
      } catch (const std::exception& e) {  // no thread to be had: this one closes unserved
        live_--;
        conns_.pop_back();
        note(peer, strfmt("cannot start a thread (%s)", e.what()));
      }
    } catch (const std::exception& e) {
      note("?", strfmt("accept failed: %s", e.what()));
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
}

bool Gate::handshake(Conn* c, Socket& s, std::string& claim) {
  const double deadline = now_s() + limits_.handshake_s;
  ServerHandshake hs(token_, purpose_, c->server_nonce, check_claim_);
  std::string frame, reply;
  for (;;) {
    if (!s.read_frame(frame, kHandshakeMaxFrame, deadline)) {
      note(c->peer, strfmt("did not prove the job token within %.0f s", limits_.handshake_s));
      return false;
    }
    const Verdict v = hs.on_frame(frame, reply);
    if (v == Verdict::kRefused) {
      note(c->peer, hs.why());
      if (!reply.empty()) s.write_frame(reply, now_s() + 1.0);
      return false;
    }
    if (v == Verdict::kAdmitted) {
      {
        std::lock_guard<std::mutex> l(mu_);
        if (c->dropped) throw SocketClosed();  // dropped a moment ago: answered BUSY in run()
        c->admitted = true;                    // from here on never dropped, never counted
      }
      if (!s.write_frame(reply, deadline)) return false;
      claim = hs.claim();
      return true;
    }
    if (!s.write_frame(reply, deadline)) {
      note(c->peer, "timed out sending the challenge");
      return false;
    }
  }
}

void Gate::run(Conn* c, Socket s) {
  try {
    std::string claim;
    if (handshake(c, s, claim)) {
      if (serve_) {
        serve_(s, c->peer, claim);
      } else {
        std::lock_guard<std::mutex> l(mu_);
        c->fd = -1;  // no longer ours: the destructor must not shut it down
        admitted_.push_back(std::move(s));
        admitted_cv_.notify_all();
      }
    }
  } catch (const SocketClosed&) {
    // The other end hung up (the normal end of a served connection), or the gate dropped
    // this one for room: then its client hears why and tries again.
    bool dropped = false;
    {
      std::lock_guard<std::mutex> l(mu_);
      dropped = c->dropped;
    }
    if (dropped) {
      try {
        s.write_frame("BUSY too many connections that have not proved the job token yet; try again",
                      now_s() + 0.5);
      } catch (...) {
      }
    }
  } catch (const FrameTooLong& e) {
    note(c->peer, strfmt("a frame of %zu bytes, over the %zu-byte limit", e.bytes, e.limit));
  } catch (const std::exception& e) {
    note(c->peer, e.what());
  } catch (...) {
    note(c->peer, "unknown error");
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    c->fd = -1;  // before the close: the number may be reused at once
  }
  s.close();
  live_--;
  std::lock_guard<std::mutex> l(mu_);
  c->done = true;  // the last touch: the acceptor may join and free c from here on
}

}  // namespace rz
