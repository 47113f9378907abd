// comm/store.cpp: the rendezvous store's server and client (protocol in store.h).
#include "comm/store.h"

#include <cstdio>
#include <cstring>
#include <thread>

#include "base/check.h"

namespace rz {
namespace {

constexpr const char* kHello = "RZ1 ";

void put_u32(std::string& s, uint32_t v) { s.append(reinterpret_cast<const char*>(&v), 4); }
bool get_u32(const std::string& s, size_t& pos, uint32_t& v) {
  if (pos + 4 > s.size()) return false;
  std::memcpy(&v, s.data() + pos, 4);
  pos += 4;
  return true;
}

// Reads one frame; false on timeout, throws SocketClosed / rz::Error on EOF / oversize.
bool read_frame(const Socket& s, std::string& out, double deadline) {
  uint32_t len = 0;
  if (!s.read_all(&len, 4, deadline)) return false;
  RZ_CHECK(len <= kStoreMaxFrame, "frame of %u bytes exceeds the %zu-byte limit", len, kStoreMaxFrame);
  out.resize(len);
  return s.read_all(out.data(), len, deadline);
}

bool write_frame(const Socket& s, const std::string& payload, double deadline) {
  std::string f;
  put_u32(f, static_cast<uint32_t>(payload.size()));
  f += payload;
  return s.write_all(f.data(), f.size(), deadline);
}

}  // namespace

StoreRequest parse_store_request(std::string_view frame) {
  StoreRequest r;
  std::string f(frame);
  size_t pos = 1;
  uint32_t klen = 0;
  if (f.empty() || (f[0] != 'S' && f[0] != 'C' && f[0] != 'G') || !get_u32(f, pos, klen) || klen > f.size() - pos)
    return r;
  r.key = f.substr(pos, klen);
  pos += klen;
  if (f[0] == 'G') {
    if (!get_u32(f, pos, r.wait_ms) || pos != f.size()) return r;
  } else {
    r.value = f.substr(pos);
  }
  r.op = f[0];
  return r;
}

bool parse_store_hello(std::string_view frame, std::string& token, std::string& nonce) {
  if (frame.substr(0, 4) != kHello) return false;
  std::string_view rest = frame.substr(4);
  const size_t nl = rest.find('\n');
  token = std::string(rest.substr(0, nl));
  nonce = nl == std::string_view::npos ? std::string() : std::string(rest.substr(nl + 1));
  return true;
}

StoreServer::StoreServer(const std::string& bind_host, int port, std::string job_token, std::string job_nonce,
                         int max_connections)
    : token_(std::move(job_token)),
      nonce_(std::move(job_nonce)),
      max_connections_(max_connections),
      listener_(Socket::listen_on(port, "rendezvous store", bind_host)) {
  port_ = listener_.local_port();
  acceptor_ = std::thread([this] { accept_loop(); });
}

StoreServer::~StoreServer() {
  stop_ = true;
  cv_.notify_all();
  if (acceptor_.joinable()) acceptor_.join();
  for (auto& c : conns_) c.thread.join();
}

void StoreServer::refuse(const std::string& peer, const std::string& why) {
  // Logged for the first connections only: a flood must not turn into a flood of lines.
  if (refused_++ < 20)
    std::fprintf(stderr, "ringzero store: refused connection from %s: %s\n", peer.c_str(), why.c_str());
}

void StoreServer::reap_finished() {
  for (size_t i = 0; i < conns_.size();) {
    if (conns_[i].done->load()) {
      conns_[i].thread.join();
      conns_[i] = std::move(conns_.back());
      conns_.pop_back();
    } else {
      ++i;
    }
  }
}

void StoreServer::accept_loop() {
  while (!stop_) {
    // Nothing may escape this thread: an exception here would terminate rank 0.
    try {
      reap_finished();
      std::string peer;
      Socket c = listener_.accept_until(now_s() + 0.1, &peer);
      if (!c.valid()) continue;
      reap_finished();
      if (conns_.size() >= static_cast<size_t>(max_connections_)) {
        refuse(peer, strfmt("%d connections already open", max_connections_));
        continue;  // c closes here
      }
      auto done = std::make_shared<std::atomic<bool>>(false);
      live_++;
      try {
        conns_.push_back({std::thread([this, s = std::move(c), peer, done]() mutable {
                            serve(std::move(s), peer);
                            live_--;
                            done->store(true);
                          }),
                          done});
      } catch (const std::exception& e) {  // no thread to be had: refuse this one
        live_--;
        refuse(peer, strfmt("cannot start a thread (%s)", e.what()));
      }
    } catch (const std::exception& e) {
      refuse("?", strfmt("accept failed: %s", e.what()));
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
}

void StoreServer::serve(Socket conn, std::string peer) {
  auto refuse = [&](const std::string& why) { this->refuse(peer, why); };
  try {
    std::string frame, token, nonce;
    // The hello must come promptly; a silent connection is dropped after 10 s.
    if (!read_frame(conn, frame, now_s() + 10.0)) return refuse("no hello within 10 s");
    if (!parse_store_hello(frame, token, nonce)) return refuse("malformed hello (not a ringzero rank?)");
    if (token != token_) return refuse("wrong job token (RINGZERO_JOB_TOKEN differs from rank 0's)");
    if (!nonce_.empty() && !nonce.empty() && nonce != nonce_) {
      refuse("a rank of another job (its job nonce differs): two jobs share this port and token");
      write_frame(conn, "NO a rank of another job: this store belongs to a job with a different nonce "
                        "(two jobs share MASTER_PORT and RINGZERO_JOB_TOKEN?)", now_s() + 5.0);
      return;
    }
    write_frame(conn, "OK", now_s() + 30.0);
    while (!stop_) {
      if (!conn.wait_readable(now_s() + 0.1)) continue;
      if (!read_frame(conn, frame, now_s() + 30.0)) return refuse("request frame cut short");
      StoreRequest rq = parse_store_request(frame);
      if (rq.op == 0)
        return refuse(strfmt("malformed request (%zu bytes, first byte 0x%02x)", frame.size(),
                             frame.empty() ? 0 : static_cast<unsigned char>(frame[0])));
      if (rq.op == 'S' || rq.op == 'C') {
        std::string reply = "OK";
        {
          std::lock_guard<std::mutex> l(mu_);
          auto it = kv_.find(rq.key);
          if (rq.op == 'C' && it != kv_.end()) reply = "X" + it->second;
          else kv_[rq.key] = rq.value;
        }
        cv_.notify_all();
        write_frame(conn, reply, now_s() + 30.0);
      } else {
        std::string reply;
        {
          std::unique_lock<std::mutex> l(mu_);
          double deadline = now_s() + rq.wait_ms / 1000.0;
          while (!stop_ && kv_.find(rq.key) == kv_.end() && now_s() < deadline)
            cv_.wait_for(l, std::chrono::milliseconds(100));
          auto it = kv_.find(rq.key);
          reply = it == kv_.end() ? std::string("T") : "V" + it->second;
        }
        write_frame(conn, reply, now_s() + 30.0);
      }
    }
  } catch (const SocketClosed&) {
    // The rank hung up: the normal end of a connection.
  } catch (const std::exception& e) {
    refuse(e.what());
  } catch (...) {
    refuse("unknown error");
  }
}

StoreClient::StoreClient(const std::string& host, int port, const std::string& job_token, double timeout_s,
                         const std::string& job_nonce)
    : where_(strfmt("%s:%d", host.c_str(), port)), timeout_s_(timeout_s) {
  sock_ = Socket::connect_to(host, port, now_s() + timeout_s, "rendezvous (MASTER_ADDR:MASTER_PORT)");
  send_frame(kHello + job_token + (job_nonce.empty() ? "" : "\n" + job_nonce));
  std::string ok;
  try {
    ok = recv_frame();
  } catch (const Error&) {
    RZ_FAIL("rendezvous: the store at %s hung up after the hello: wrong RINGZERO_JOB_TOKEN?", where_.c_str());
  }
  RZ_CHECK(ok.rfind("NO ", 0) != 0, "rendezvous: the store at %s refused this rank: %s", where_.c_str(),
           ok.substr(3).c_str());
  RZ_CHECK(ok == "OK", "rendezvous: the store at %s answered '%s' to the hello", where_.c_str(), ok.c_str());
}

void StoreClient::send_frame(const std::string& payload) {
  RZ_CHECK(payload.size() <= kStoreMaxFrame, "rendezvous: a %zu-byte request exceeds the store's limit",
           payload.size());
  try {
    RZ_CHECK(write_frame(sock_, payload, now_s() + timeout_s_), "rendezvous: timed out sending to the store at %s",
             where_.c_str());
  } catch (const SocketClosed&) {
    RZ_FAIL("rendezvous: the store at %s closed the connection (did rank 0 exit?)", where_.c_str());
  }
}

std::string StoreClient::recv_frame() {
  std::string f;
  try {
    RZ_CHECK(read_frame(sock_, f, now_s() + timeout_s_ + 5.0), "rendezvous: timed out waiting for the store at %s",
             where_.c_str());
  } catch (const SocketClosed&) {
    RZ_FAIL("rendezvous: the store at %s closed the connection (did rank 0 exit?)", where_.c_str());
  }
  return f;
}

void StoreClient::set(const std::string& key, const std::string& value) {
  std::string req = "S";
  put_u32(req, static_cast<uint32_t>(key.size()));
  req += key + value;
  send_frame(req);
  std::string ok = recv_frame();
  RZ_CHECK(ok == "OK", "rendezvous: the store at %s refused set '%s'", where_.c_str(), key.c_str());
}

bool StoreClient::claim(const std::string& key, const std::string& value, std::string* holder) {
  std::string req = "C";
  put_u32(req, static_cast<uint32_t>(key.size()));
  req += key + value;
  send_frame(req);
  std::string r = recv_frame();
  if (r == "OK") return true;
  RZ_CHECK(!r.empty() && r[0] == 'X', "rendezvous: malformed reply from the store at %s", where_.c_str());
  if (holder != nullptr) *holder = r.substr(1);
  return false;
}

std::string StoreClient::get(const std::string& key) {
  std::string req = "G";
  put_u32(req, static_cast<uint32_t>(key.size()));
  req += key;
  put_u32(req, static_cast<uint32_t>(std::min(timeout_s_ * 1000.0, 4.0e9)));
  send_frame(req);
  std::string r = recv_frame();
  RZ_CHECK(!r.empty() && (r[0] == 'V' || r[0] == 'T'), "rendezvous: malformed reply from the store at %s",
           where_.c_str());
  RZ_CHECK(r[0] == 'V', "rendezvous: timed out after %.0f s waiting for key '%s' at %s (did every rank start?)",
           timeout_s_, key.c_str(), where_.c_str());
  return r.substr(1);
}

}  // namespace rz
