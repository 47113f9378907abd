// comm/store.h: the rendezvous key-value store (rank 0 serves, every rank is a client).
//
// Ranks find each other through it: shared-memory names, tcp listen addresses, hostnames.
// Wire format, both directions: frames of [u32 length][length bytes], length <= 1 MiB.
//   client hello   "RZ1 " + job token          -> server answers "OK" or logs and hangs up
//   set            'S' [u32 klen] key value    -> "OK"
//   get            'G' [u32 klen] key [u32 ms] -> 'V' value, or 'T' when ms passed first
// A connection with a wrong token, an oversized frame or a malformed request is logged to
// stderr (with the peer's address) and closed; the store keeps serving everyone else.
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/socket.h"

namespace rz {

constexpr size_t kStoreMaxFrame = 1u << 20;

class StoreServer {
 public:
  // Listens on port (0: a free one) on all interfaces. Serving runs on its own threads.
  StoreServer(int port, std::string job_token);
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;
  int port() const { return port_; }
  size_t refused() const { return refused_.load(); }  // connections refused so far

 private:
  void accept_loop();
  void serve(Socket conn, std::string peer);

  std::string token_;
  Socket listener_;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<size_t> refused_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> kv_;
  std::vector<std::thread> threads_;  // guarded by mu_
  std::thread acceptor_;
};

class StoreClient {
 public:
  // Connects (retrying until timeout_s while rank 0 starts up) and presents the token.
  StoreClient(const std::string& host, int port, const std::string& job_token, double timeout_s);
  void set(const std::string& key, const std::string& value);
  // Waits up to the client's timeout for the key to appear.
  std::string get(const std::string& key);
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
