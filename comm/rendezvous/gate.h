// comm/rendezvous/gate.h: the door of a job's listening socket: a connection is served only once it
// proved the job token (comm/rendezvous/job_auth.h), and strangers can neither get in nor keep the
// job's own processes out.
//
// Every accepted connection runs its handshake on its own thread, against a deadline
// (GateLimits::handshake_s from accept). Connections still proving themselves ("pending")
// are bounded, all together and per peer address; when a new one would pass a bound, the
// gate drops the oldest pending connection of the address with the most of them, if that
// one has had its grace (GateLimits::grace_s), else turns the newcomer away. Either is
// told "BUSY" and its client tries again. So idle connections, however many, cannot hold
// the door shut, and a rank that got in has grace_s to prove itself, which takes a round
// trip, however fast a stranger opens new ones. A connection that proved the token is never
// counted, never dropped for room, and is served (Serve) on its thread until it ends. Log
// lines name the peer; a flood is logged in its first lines and then in a count.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <list>
#include <mutex>
#include <string>
#include <thread>

#include "comm/rendezvous/job_auth.h"
#include "comm/rendezvous/socket.h"

namespace rz {

struct GateLimits {
  int max_pending = 128;          // connections still proving the token, all addresses together
  int max_pending_per_peer = 32;  // of them from one address
  double handshake_s = 5.0;       // seconds from accept to a proven token
  double grace_s = 0.5;           // seconds a pending connection is safe from being dropped for room
};

class Gate {
 public:
  using CheckClaim = ServerHandshake::CheckClaim;
  // Runs on the connection's thread after the welcome; the connection closes when it
  // returns. Without one (null), proven connections queue for next_admitted().
  using Serve = std::function<void(Socket& conn, const std::string& peer, const std::string& claim)>;

  // log_name prefixes the log lines ("ringzero store", "ringzero tcp (rank 3)").
  Gate(Socket listener, std::string token, std::string purpose, std::string log_name, GateLimits limits,
       CheckClaim check_claim, Serve serve);
  ~Gate();  // stops accepting, hangs up every connection, joins every thread
  Gate(const Gate&) = delete;
  Gate& operator=(const Gate&) = delete;

  int port() const { return port_; }
  bool stopping() const { return stop_.load(); }
  size_t refused() const { return refused_.load(); }  // connections refused or dropped so far
  size_t live() const { return live_.load(); }        // connection threads alive
  size_t accepted() const { return accepted_.load(); }  // taken from the listener so far, turned away included
  size_t pending() const;                             // connections still proving the token
  size_t pending_from(const std::string& ip) const;
  // A log line about a connection (rate-limited with the gate's own).
  void note(const std::string& peer, const std::string& why);
  // (No Serve) the next proven connection, in the order they proved themselves; an
  // invalid Socket when none came before deadline.
  Socket next_admitted(double deadline);

 private:
  struct Conn {
    std::thread thread;
    int fd = -1;  // the connection's socket while its thread holds it open (guarded by mu_)
    std::string ip, peer;
    uint64_t order = 0;  // accept order: lower is older
    double accepted_s = 0;
    std::string server_nonce;  // drawn by the acceptor: a thread's first RAND_bytes seeds a DRBG (ms)
    bool admitted = false, dropped = false, done = false;
  };
  void accept_loop();
  void reap_finished();
  // Holds mu_. False: no room, and why says so.
  bool make_room(const std::string& ip, std::string& why);
  void run(Conn* c, Socket s);
  bool handshake(Conn* c, Socket& s, std::string& claim);

  Socket listener_;
  std::string token_, purpose_, log_name_;
  GateLimits limits_;
  CheckClaim check_claim_;
  Serve serve_;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<size_t> refused_{0}, live_{0}, accepted_{0};
  mutable std::mutex mu_;
  std::list<Conn> conns_;  // stable addresses: each thread keeps a pointer to its own
  std::list<Socket> admitted_;  // proven and not yet taken (no Serve)
  std::condition_variable admitted_cv_;
  uint64_t next_order_ = 0;
  std::thread acceptor_;
};

}  // namespace rz
