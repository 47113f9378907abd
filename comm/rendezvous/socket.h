// comm/rendezvous/socket.h: the few blocking-with-deadline TCP helpers the store and tcp transport use.
//
// Every call that can wait takes a deadline (seconds on the steady clock); nothing here
// blocks forever. Errors throw rz::Error naming the address and what failed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>

namespace rz {

double now_s();  // steady clock, seconds

struct SockAddr {
  std::string host;
  int port = 0;
};

class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket();
  Socket(Socket&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Socket& operator=(Socket&& o) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void close();

  // Connects, retrying refused connections (the listener may not be up yet) until deadline.
  static Socket connect_to(const std::string& host, int port, double deadline, const char* what);
  // Listens on bind_host's address (empty: all interfaces); port 0 picks a free one.
  static Socket listen_on(int port, const char* what, const std::string& bind_host = "");
  // Waits up to deadline for a connection; invalid Socket on timeout. peer gets "ip:port".
  Socket accept_until(double deadline, std::string* peer) const;
  int local_port() const;
  std::string local_ip() const;  // address of this end of a connected socket

  // Return false on timeout; throw on EOF / error with what + strerror in the message.
  // write_all: MSG_NOSIGNAL, so a closed peer is an error, not SIGPIPE.
  bool write_all(const void* p, size_t n, double deadline) const;
  // read_all: false on timeout; throws "closed" on EOF.
  bool read_all(void* p, size_t n, double deadline) const;
  // Waits until readable (or deadline). True if readable (or EOF/error pending).
  bool wait_readable(double deadline) const;

  // Frames of [u32 little-endian length][bytes], the rendezvous wire format. read_frame:
  // false on timeout; throws SocketClosed on EOF and FrameTooLong (before allocating
  // anything) when the length is over max_bytes.
  bool read_frame(std::string& out, size_t max_bytes, double deadline) const;
  bool write_frame(const std::string& payload, double deadline) const;

 private:
  int fd_ = -1;
};

// Thrown by read_all/write_all when the other end closed or reset the connection.
struct SocketClosed : std::exception {
  const char* what() const noexcept override { return "connection closed by peer"; }
};

// Thrown by read_frame for a frame longer than its limit.
struct FrameTooLong : std::exception {
  size_t bytes = 0, limit = 0;
  FrameTooLong(size_t b, size_t l) : bytes(b), limit(l) {}
  const char* what() const noexcept override { return "frame longer than the limit"; }
};

}  // namespace rz
