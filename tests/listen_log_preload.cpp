// tests/listen_log_preload.cpp: an LD_PRELOAD library for test_comm_rendezvous. Every
// listen() of the process (and of the processes it starts, which inherit LD_PRELOAD)
// appends the socket's bound address to the file named by RZ_LISTEN_LOG, one
// "pid ip:port" line each, so a test can see where a whole job listened. listen() rather
// than bind(): a socket listening unbound would be on every interface too.
#include <arpa/inet.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

extern "C" int listen(int fd, int backlog) {
  using ListenFn = int (*)(int, int);
  static ListenFn real = reinterpret_cast<ListenFn>(dlsym(RTLD_NEXT, "listen"));
  const int rc = real(fd, backlog);
  const char* path = std::getenv("RZ_LISTEN_LOG");
  if (rc == 0 && path != nullptr) {
    sockaddr_storage a{};
    socklen_t len = sizeof a;
    char ip[INET6_ADDRSTRLEN] = "?";
    int port = -1;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
      if (a.ss_family == AF_INET) {
        const auto* v4 = reinterpret_cast<const sockaddr_in*>(&a);
        inet_ntop(AF_INET, &v4->sin_addr, ip, sizeof ip);
        port = ntohs(v4->sin_port);
      } else if (a.ss_family == AF_INET6) {
        const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&a);
        inet_ntop(AF_INET6, &v6->sin6_addr, ip, sizeof ip);
        port = ntohs(v6->sin6_port);
      }
    }
    char line[128];
    const int n = std::snprintf(line, sizeof line, "%d %s:%d\n", static_cast<int>(getpid()), ip, port);
    const int out = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (out >= 0) {
      if (write(out, line, static_cast<size_t>(n)) < 0) {
      }
      close(out);
    }
  }
  return rc;
}
