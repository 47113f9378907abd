// comm/rendezvous/store.cpp: the rendezvous store's server and client (protocol in store.h).
#include "comm/rendezvous/store.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <thread>

#include "base/check.h"
#include "comm/rendezvous/job_auth.h"

namespace rz {
namespace {

void put_u32(std::string& s, uint32_t v) { s.append(reinterpret_cast<const char*>(&v), 4); }
bool get_u32(const std::string& s, size_t& pos, uint32_t& v) {
  if (pos + 4 > s.size()) return false;
  std::memcpy(&v, s.data() + pos, 4);
  pos += 4;
  return true;
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

StoreServer::StoreServer(const std::string& bind_host, int port, std::string job_token, std::string job_nonce,
                         GateLimits limits)
    : nonce_(std::move(job_nonce)) {
  // A rank that gives no nonce (torchrun, srun) is let in; one that gives another is of
  // another job that shares this port and token.
  auto check_nonce = [this](const std::string& nonce) -> std::string {
    if (nonce_.empty() || nonce.empty() || nonce == nonce_) return "";
    return "a rank of another job: this store belongs to a job with a different nonce (two jobs share MASTER_PORT "
           "and RINGZERO_JOB_TOKEN?)";
  };
  gate_ = std::make_unique<Gate>(Socket::listen_on(port, "rendezvous store", bind_host), std::move(job_token),
                                 "store", "ringzero store", limits, check_nonce,
                                 [this](Socket& conn, const std::string&, const std::string&) { serve(conn); });
}

StoreServer::~StoreServer() {
  stop_ = true;
  cv_.notify_all();
  gate_.reset();
}

void StoreServer::serve(Socket& conn) {
  std::string frame;
  while (!stop_) {
    if (!conn.wait_readable(now_s() + 0.1)) continue;
    // A failed check ends this connection; the gate logs the message with the peer.
    RZ_CHECK(conn.read_frame(frame, kStoreMaxFrame, now_s() + 30.0), "request frame cut short");
    StoreRequest rq = parse_store_request(frame);
    RZ_CHECK(rq.op != 0, "malformed request (%zu bytes, first byte 0x%02x)", frame.size(),
             frame.empty() ? 0 : static_cast<unsigned char>(frame[0]));
    std::string reply;
    if (rq.op == 'S' || rq.op == 'C') {
      reply = "OK";
      {
        std::lock_guard<std::mutex> l(mu_);
        auto it = kv_.find(rq.key);
        if (rq.op == 'C' && it != kv_.end()) reply = "X" + it->second;
        else kv_[rq.key] = rq.value;
      }
      cv_.notify_all();
    } else {
      std::unique_lock<std::mutex> l(mu_);
      double deadline = now_s() + rq.wait_ms / 1000.0;
      while (!stop_ && kv_.find(rq.key) == kv_.end() && now_s() < deadline)
        cv_.wait_for(l, std::chrono::milliseconds(100));
      auto it = kv_.find(rq.key);
      reply = it == kv_.end() ? std::string("T") : "V" + it->second;
    }
    conn.write_frame(reply, now_s() + 30.0);
  }
}

StoreClient::StoreClient(const std::string& host, int port, const std::string& job_token, double timeout_s,
                         const std::string& job_nonce)
    : where_(strfmt("%s:%d", host.c_str(), port)), timeout_s_(timeout_s) {
  sock_ = connect_with_proof(host, port, job_token, "store", job_nonce, now_s() + timeout_s,
                             "rendezvous: the store at " + where_);
}

void StoreClient::send_frame(const std::string& payload) {
  RZ_CHECK(payload.size() <= kStoreMaxFrame, "rendezvous: a %zu-byte request exceeds the store's limit",
           payload.size());
  try {
    RZ_CHECK(sock_.write_frame(payload, now_s() + timeout_s_), "rendezvous: timed out sending to the store at %s",
             where_.c_str());
  } catch (const SocketClosed&) {
    RZ_FAIL("rendezvous: the store at %s closed the connection (did rank 0 exit?)", where_.c_str());
  }
}

std::string StoreClient::recv_frame() {
  std::string f;
  try {
    RZ_CHECK(sock_.read_frame(f, kStoreMaxFrame, now_s() + timeout_s_ + 5.0),
             "rendezvous: timed out waiting for the store at %s", where_.c_str());
  } catch (const SocketClosed&) {
    RZ_FAIL("rendezvous: the store at %s closed the connection (did rank 0 exit?)", where_.c_str());
  } catch (const FrameTooLong& e) {
    RZ_FAIL("rendezvous: the store at %s sent a %zu-byte reply, over the %zu-byte limit", where_.c_str(), e.bytes,
            e.limit);
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

std::optional<std::string> StoreClient::try_get(const std::string& key, double wait_s) {
  std::string req = "G";
  put_u32(req, static_cast<uint32_t>(key.size()));
  req += key;
  put_u32(req, static_cast<uint32_t>(std::clamp(wait_s * 1000.0, 0.0, 4.0e9)));
  send_frame(req);
  std::string r = recv_frame();
  RZ_CHECK(!r.empty() && (r[0] == 'V' || r[0] == 'T'), "rendezvous: malformed reply from the store at %s",
           where_.c_str());
  if (r[0] == 'T') return std::nullopt;
  return r.substr(1);
}

std::string StoreClient::get(const std::string& key) {
  std::optional<std::string> v = try_get(key, timeout_s_);
  RZ_CHECK(v.has_value(), "rendezvous: timed out after %.0f s waiting for key '%s' at %s (did every rank start?)",
           timeout_s_, key.c_str(), where_.c_str());
  return *v;
}

}  // namespace rz
