// comm/rendezvous/store.h: the rendezvous key-value store (rank 0 serves, every rank is a client).
//
// Ranks find each other through it: shared-memory names, tcp listen addresses, hostnames.
// A connection first proves the job token without sending it (comm/rendezvous/job_auth.h; its claim
// is the job nonce, if any) through the store's Gate (comm/rendezvous/gate.h: a short handshake
// deadline, bounded unproven connections, proven ones never turned away). Then requests,
// frames of [u32 length][bytes], length <= 1 MiB, in both directions:
//   set            'S' [u32 klen] key value    -> "OK"
//   claim          'C' [u32 klen] key value    -> "OK" (key was free, now set) or 'X' + the
//                                                 value that holds it (a duplicate rank)
//   get            'G' [u32 klen] key [u32 ms] -> 'V' value, or 'T' when ms passed first
// A connection with a wrong token, an oversized frame or a malformed request is logged to
// stderr (with the peer's address) and closed; the store keeps serving everyone else.
// The job nonce is a random value the launcher gives the ranks of one single-node job, so
// a rank of another job that shares the port and token is refused at the handshake ("NO").
// Each connection has its own thread; finished threads are joined as the store goes, so a
// stream of short connections costs nothing that stays.
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "comm/rendezvous/gate.h"
#include "comm/rendezvous/socket.h"

namespace rz {

constexpr size_t kStoreMaxFrame = 1u << 20;

// One client request, split out of its frame (parse_store_request: empty op when malformed).
struct StoreRequest {
  char op = 0;  // 'S', 'C' or 'G'
  std::string key, value;
  uint32_t wait_ms = 0;  // 'G' only
};
StoreRequest parse_store_request(std::string_view frame);

class StoreServer {
 public:
  // Listens on bind_host (empty: all interfaces) at port (0: a free one); serving runs on
  // its own threads. job_nonce empty: any nonce (or none) is accepted.
  StoreServer(const std::string& bind_host, int port, std::string job_token, std::string job_nonce = "",
              GateLimits limits = {});
  // Loopback only: tests and single-host jobs.
  StoreServer(int port, std::string job_token) : StoreServer("127.0.0.1", port, std::move(job_token)) {}
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;
  int port() const { return gate_->port(); }
  size_t refused() const { return gate_->refused(); }  // connections refused or dropped so far
  size_t live_connections() const { return gate_->live(); }
  size_t accepted_connections() const { return gate_->accepted(); }  // taken from the listen queue so far
  size_t pending_connections() const { return gate_->pending(); }  // not yet proven
  size_t pending_from(const std::string& ip) const { return gate_->pending_from(ip); }

 private:
  void serve(Socket& conn);

  std::string nonce_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> kv_;
  std::unique_ptr<Gate> gate_;  // last: destroyed first, so its threads end while kv_ lives
};

class StoreClient {
 public:
  // Connects (retrying until timeout_s while rank 0 starts up) and proves the token.
  StoreClient(const std::string& host, int port, const std::string& job_token, double timeout_s,
              const std::string& job_nonce = "");
  void set(const std::string& key, const std::string& value);
  // Sets key only if nobody has: true; else false and *holder gets the value that holds it.
  bool claim(const std::string& key, const std::string& value, std::string* holder);
  // Waits up to the client's timeout for the key to appear.
  std::string get(const std::string& key);
  // Waits up to wait_s (0: not at all) for the key; nullopt when it has not appeared.
  std::optional<std::string> try_get(const std::string& key, double wait_s);
  // This end's IP address as the store sees it: reachable by the other ranks.
  std::string local_ip() const { return sock_.local_ip(); }

 private:
  void send_frame(const std::string& payload);
  std::string recv_frame();
  Socket sock_;
  std::string where_;  // "host:port" for errors
  double timeout_s_;
};

}  // namespace rz
