// comm/rendezvous/socket.cpp: blocking TCP helpers with deadlines (see socket.h).
#include "comm/rendezvous/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "base/check.h"

namespace rz {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

namespace {

int poll_ms(double deadline) {
  double left = deadline - now_s();
  if (left <= 0) return 0;
  return static_cast<int>(std::min(left * 1000.0 + 1.0, 100.0));  // short slices: no long sleep
}

void set_common_options(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

}  // namespace

Socket::~Socket() { close(); }

Socket& Socket::operator=(Socket&& o) noexcept {
  if (this != &o) {
    close();
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

void Socket::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

Socket Socket::connect_to(const std::string& host, int port, double deadline, const char* what) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  std::string port_s = std::to_string(port);
  int rc = getaddrinfo(host.c_str(), port_s.c_str(), &hints, &res);
  RZ_CHECK(rc == 0 && res != nullptr, "%s: cannot resolve host '%s': %s", what, host.c_str(), gai_strerror(rc));
  std::string last_err;
  for (;;) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    RZ_SYSCHECK(fd, "%s: socket()", what);
    if (::connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
      freeaddrinfo(res);
      set_common_options(fd);
      return Socket(fd);
    }
    last_err = errno_string();
    ::close(fd);
    if (now_s() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  freeaddrinfo(res);
  RZ_FAIL("%s: could not connect to %s:%d before the timeout (%s)", what, host.c_str(), port, last_err.c_str());
}

Socket Socket::listen_on(int port, const char* what, const std::string& bind_host) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  if (!bind_host.empty()) {
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    int rc = getaddrinfo(bind_host.c_str(), nullptr, &hints, &res);
    RZ_CHECK(rc == 0 && res != nullptr, "%s: cannot resolve host '%s': %s", what, bind_host.c_str(), gai_strerror(rc));
    a.sin_addr = reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr;
    freeaddrinfo(res);
  }
  a.sin_port = htons(static_cast<uint16_t>(port));
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  RZ_SYSCHECK(fd, "%s: socket()", what);
  Socket s(fd);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  RZ_SYSCHECK(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), "%s: cannot bind %s:%d", what,
              bind_host.empty() ? "*" : bind_host.c_str(), port);
  RZ_SYSCHECK(::listen(fd, 128), "%s: listen on port %d", what, port);
  return s;
}

Socket Socket::accept_until(double deadline, std::string* peer) const {
  for (;;) {
    if (wait_readable(deadline)) {
      sockaddr_in a{};
      socklen_t len = sizeof a;
      int fd = ::accept4(fd_, reinterpret_cast<sockaddr*>(&a), &len, SOCK_CLOEXEC);
      if (fd >= 0) {
        set_common_options(fd);
        if (peer != nullptr) {
          char ip[INET_ADDRSTRLEN] = {0};
          inet_ntop(AF_INET, &a.sin_addr, ip, sizeof ip);
          *peer = strfmt("%s:%d", ip, ntohs(a.sin_port));
        }
        return Socket(fd);
      }
    }
    if (now_s() >= deadline) return Socket();
  }
}

int Socket::local_port() const {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  RZ_SYSCHECK(getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len), "getsockname");
  return ntohs(a.sin_port);
}

std::string Socket::local_ip() const {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  RZ_SYSCHECK(getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len), "getsockname");
  char ip[INET_ADDRSTRLEN] = {0};
  inet_ntop(AF_INET, &a.sin_addr, ip, sizeof ip);
  return ip;
}

bool Socket::wait_readable(double deadline) const {
  for (;;) {
    pollfd p{fd_, POLLIN, 0};
    int rc = ::poll(&p, 1, poll_ms(deadline));
    if (rc > 0) return true;
    if (rc < 0 && errno != EINTR) return true;  // let the read report the error
    if (now_s() >= deadline) return false;
  }
}

bool Socket::write_all(const void* p, size_t n, double deadline) const {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t w = ::send(fd_, c, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      c += w;
      n -= static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      pollfd pf{fd_, POLLOUT, 0};
      ::poll(&pf, 1, poll_ms(deadline));
      if (now_s() >= deadline) return false;
      continue;
    }
    if (w < 0 && (errno == EPIPE || errno == ECONNRESET)) throw SocketClosed();
    RZ_FAIL("socket send: %s", errno_string().c_str());
  }
  return true;
}

bool Socket::read_all(void* p, size_t n, double deadline) const {
  char* c = static_cast<char*>(p);
  while (n > 0) {
    ssize_t r = ::recv(fd_, c, n, MSG_DONTWAIT);
    if (r > 0) {
      c += r;
      n -= static_cast<size_t>(r);
      continue;
    }
    if (r == 0) throw SocketClosed();
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      if (!wait_readable(deadline)) return false;
      continue;
    }
    if (errno == ECONNRESET) throw SocketClosed();
    RZ_FAIL("socket recv: %s", errno_string().c_str());
  }
  return true;
}

bool Socket::read_frame(std::string& out, size_t max_bytes, double deadline) const {
  unsigned char len_le[4];
  if (!read_all(len_le, 4, deadline)) return false;
  const size_t len = size_t(len_le[0]) | size_t(len_le[1]) << 8 | size_t(len_le[2]) << 16 | size_t(len_le[3]) << 24;
  if (len > max_bytes) throw FrameTooLong(len, max_bytes);
  out.resize(len);
  return read_all(out.data(), len, deadline);
}

bool Socket::write_frame(const std::string& payload, double deadline) const {
  RZ_CHECK(payload.size() <= 0xffffffffu, "socket: a %zu-byte frame does not fit its length field", payload.size());
  std::string f(4, '\0');
  for (int i = 0; i < 4; ++i) f[i] = static_cast<char>((payload.size() >> (8 * i)) & 0xff);
  f += payload;
  return write_all(f.data(), f.size(), deadline);
}

}  // namespace rz
