// comm/store.cpp: the rendezvous store's server and client (protocol in store.h).
#include "comm/store.h"

#include <cstdio>
#include <cstring>

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

StoreServer::StoreServer(int port, std::string job_token)
    : token_(std::move(job_token)), listener_(Socket::listen_on(port, "rendezvous store")) {
  port_ = listener_.local_port();
  acceptor_ = std::thread([this] { accept_loop(); });
}

StoreServer::~StoreServer() {
  stop_ = true;
  cv_.notify_all();
  if (acceptor_.joinable()) acceptor_.join();
  std::vector<std::thread> ts;
  {
    std::lock_guard<std::mutex> l(mu_);
    ts.swap(threads_);
  }
  for (auto& t : ts) t.join();
}

void StoreServer::accept_loop() {
  while (!stop_) {
    std::string peer;
    Socket c = listener_.accept_until(now_s() + 0.1, &peer);
    if (!c.valid()) continue;
    std::lock_guard<std::mutex> l(mu_);
    threads_.emplace_back([this, s = std::move(c), peer]() mutable { serve(std::move(s), peer); });
  }
}

void StoreServer::serve(Socket conn, std::string peer) {
  auto refuse = [&](const std::string& why) {
    refused_++;
    std::fprintf(stderr, "ringzero store: refused connection from %s: %s\n", peer.c_str(), why.c_str());
  };
  try {
    std::string frame;
    // The hello must come promptly; a silent connection is dropped after 30 s.
    if (!read_frame(conn, frame, now_s() + 30.0)) return refuse("no hello within 30 s");
    if (frame.compare(0, 4, kHello) != 0) return refuse("malformed hello (not a ringzero rank?)");
    if (frame.substr(4) != token_) return refuse("wrong job token (RINGZERO_JOB_TOKEN differs from rank 0's)");
    write_frame(conn, "OK", now_s() + 30.0);
    while (!stop_) {
      if (!conn.wait_readable(now_s() + 0.1)) continue;
      if (!read_frame(conn, frame, now_s() + 30.0)) return refuse("request frame cut short");
      size_t pos = 1;
      uint32_t klen = 0;
      if (frame.empty() || (frame[0] != 'S' && frame[0] != 'G') || !get_u32(frame, pos, klen) ||
          pos + klen > frame.size())
        return refuse(strfmt("malformed request (%zu bytes, first byte 0x%02x)", frame.size(),
                             frame.empty() ? 0 : static_cast<unsigned char>(frame[0])));
      std::string key = frame.substr(pos, klen);
      pos += klen;
      if (frame[0] == 'S') {
        {
          std::lock_guard<std::mutex> l(mu_);
          kv_[key] = frame.substr(pos);
        }
        cv_.notify_all();
        write_frame(conn, "OK", now_s() + 30.0);
      } else {
        uint32_t ms = 0;
        if (!get_u32(frame, pos, ms) || pos != frame.size()) return refuse("malformed get request");
        std::string reply;
        {
          std::unique_lock<std::mutex> l(mu_);
          double deadline = now_s() + ms / 1000.0;
          while (!stop_ && kv_.find(key) == kv_.end() && now_s() < deadline)
            cv_.wait_for(l, std::chrono::milliseconds(100));
          auto it = kv_.find(key);
          reply = it == kv_.end() ? std::string("T") : "V" + it->second;
        }
        write_frame(conn, reply, now_s() + 30.0);
      }
    }
  } catch (const SocketClosed&) {
    // The rank hung up: the normal end of a connection.
  } catch (const std::exception& e) {
    refuse(e.what());
  }
}

StoreClient::StoreClient(const std::string& host, int port, const std::string& job_token, double timeout_s)
    : where_(strfmt("%s:%d", host.c_str(), port)), timeout_s_(timeout_s) {
  sock_ = Socket::connect_to(host, port, now_s() + timeout_s, "rendezvous (MASTER_ADDR:MASTER_PORT)");
  send_frame(kHello + job_token);
  std::string ok;
  try {
    ok = recv_frame();
  } catch (const Error&) {
    RZ_FAIL("rendezvous: the store at %s hung up after the hello: wrong RINGZERO_JOB_TOKEN?", where_.c_str());
  }
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
